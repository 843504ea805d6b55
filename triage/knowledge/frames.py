"""Which stack frames are library code, not the user's (`kind: frames`): decided here, once.

    kind: frames
    library:                    # a frame is library code when any pattern finds its file
      - {pattern: '(?:^|/)(?:site|dist)-packages/', why: "installed packages"}
    examples:
      library: ["/usr/lib/python3.11/site-packages/torch/nn/modules/module.py"]
      user: ["/workspace/train.py"]
      cut_library: ["ckages/deepspeed/runtime/engine.py"]   # a paste cut mid-path (optional)
      cut_user: ["rkspace/train.py"]
    waiting:                    # py-spy frames that wait for the peers, or in setup
      functions: '^(?:all_reduce|barrier|...)$'
      files: 'torch/distributed/|...'
      setup_functions: '^(?:init_process_group|...)$'
      examples: {waiting: ["all_reduce (.../distributed_c10d.py)"], setup: [...], neither: [...]}

A file name is tested as written (backslashes read as slashes) and as its path below
`site-packages/`, so `^torch/` names torch wherever it is installed. It is the one answer to
"is this frame library code or the user's": the analysis asks it for the user's frame of a
traceback, a py-spy stack and a flight-recorder record, the rule engine for where an exception
was raised (a rule's `match.raised_in`). Shipped only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import regex

from triage import regex_cache
from triage.knowledge.problems import compile_alternation, compile_regex
from triage.model import StackFrame

KIND = "frames"
_KEYS = {"kind", "library", "examples", "waiting"}
_WAITING_KEYS = {"functions", "files", "setup_functions", "examples"}
_NEVER = regex_cache.compile(r"(?!)")  # a broken pattern (reported): matches nothing
_SITE = regex_cache.compile(r"^.*?/(?:site|dist)-packages/")


@dataclass(frozen=True)
class LibraryFrames:
    pattern: regex.Pattern[str] | None = None
    # py-spy frames that wait for the peers: function and file (`waiting` in frames.yaml)
    wait_functions: regex.Pattern[str] = _NEVER
    distributed_files: regex.Pattern[str] = _NEVER
    setup_functions: regex.Pattern[str] = _NEVER

    def is_waiting(self, frames: Sequence[StackFrame]) -> bool:
        """Inside a collective or a distributed wait within its innermost few frames."""
        return any(
            self.wait_functions.match(f.function) and self.distributed_files.search(f.filename)
            for f in frames[:6]
        )

    def setup_call(self, frames: Sequence[StackFrame]) -> str | None:
        """The process-group setup or rendezvous call a stack stands in, as the code called it
        (the outermost public one: `init_process_group`, `next_rendezvous`), or None."""
        found: list[str] = []
        for f in frames:
            name = f.function.rsplit(".", 1)[-1]  # py-spy names a method `Class.method`
            if self.setup_functions.match(name) and self.distributed_files.search(f.filename):
                found.append(name)
        public = [n for n in found if not n.startswith("_")]
        return (public or found or [None])[-1]

    def is_library(self, filename: str, cut: bool = False) -> bool:
        """Is a frame of this file library code (installed, standard library, no file)?

        `cut`: the file is what a paste kept of a path whose start was cut off
        (`ckages/deepspeed/runtime/engine.py`); its first part is a piece of a folder's
        name, so the path is also read from the folder after it (`deepspeed/...`)."""
        if self.pattern is None:
            return False
        name = filename.replace("\\", "/")
        names = [name, _SITE.sub("", name)]
        if cut and "/" in name:
            names.append(name.split("/", 1)[1])
        return any(self.pattern.search(n) for n in names)


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> LibraryFrames:
    unknown = set(body) - _KEYS
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS - {'kind'})}")
    parts: list[str] = []
    raw = body.get("library")
    if not isinstance(raw, list) or not raw:
        report("library", "needs a list of {pattern, why}")
        raw = []
    for i, spec in enumerate(raw):
        item = f"library #{i + 1}"
        if not isinstance(spec, dict) or not spec.get("pattern") or not spec.get("why"):
            report(item, "needs pattern and why")
            continue
        if compile_regex(spec["pattern"], item, report) is None:
            continue
        parts.append(spec["pattern"])
    frames = LibraryFrames(
        compile_alternation(parts, "frames", report),
        *_waiting(body.get("waiting"), report),
    )
    examples = body.get("examples") or {}
    library, user = examples.get("library") or [], examples.get("user") or []
    if not library or not user:
        report("examples", "needs library and user file names")
    for name in library:
        if not frames.is_library(name):
            report("examples", f"{name!r} is listed as library code but no pattern finds it")
    for name in user:
        if frames.is_library(name):
            report("examples", f"{name!r} is listed as the user's code but a pattern finds it")
    for name in examples.get("cut_library") or []:
        if not frames.is_library(name, cut=True):
            report("examples", f"cut path {name!r} is listed as library code but reads as not")
    for name in examples.get("cut_user") or []:
        if frames.is_library(name, cut=True):
            report("examples", f"cut path {name!r} is listed as the user's but reads as library")
    return frames


def _waiting(
    raw: Any, report: Callable[[str, str], None]
) -> tuple[regex.Pattern[str], regex.Pattern[str], regex.Pattern[str]]:
    raw = raw if isinstance(raw, dict) else {}
    if set(raw) != _WAITING_KEYS:
        report("waiting", f"needs exactly {sorted(_WAITING_KEYS)}")
    waits, files, setup = (
        compile_regex(raw.get(key), f"waiting.{key}", report) or _NEVER
        for key in ("functions", "files", "setup_functions")
    )
    probe = LibraryFrames(None, waits, files, setup)
    examples = raw.get("examples") if isinstance(raw.get("examples"), dict) else {}
    for expected in ("waiting", "setup", "neither"):
        listed = examples.get(expected)
        if not isinstance(listed, list) or not listed:
            report("waiting.examples", f"needs `{expected}` frames: `function (file)`")
            continue
        for text in listed:
            function, _, file = str(text).partition(" (")
            frames = (StackFrame(function=function, filename=file.rstrip(")"), line=None),)
            got = (
                "setup"
                if probe.setup_call(frames)
                else "waiting"
                if probe.is_waiting(frames)
                else "neither"
            )
            if got != expected:
                report("waiting.examples", f"{text!r} is listed as {expected} but reads as {got}")
    return waits, files, setup


def merge(values: Sequence[LibraryFrames]) -> LibraryFrames:
    return values[0] if values else LibraryFrames()
