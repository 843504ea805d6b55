"""Which stack frames are library code, not the user's (`kind: frames`): decided here, once.

    kind: frames
    library:                    # a frame is library code when any pattern finds its file
      - {pattern: '(?:^|/)(?:site|dist)-packages/', why: "installed packages"}
    examples:
      library: ["/usr/lib/python3.11/site-packages/torch/nn/modules/module.py"]
      user: ["/workspace/train.py"]

A file name is tested as written (backslashes read as slashes) and as its path below
`site-packages/`, so `^torch/` names torch wherever it is installed. The analysis reads it to
find the user's frame of a traceback, a py-spy stack and a flight-recorder record. Shipped only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import regex

from triage import regex_cache
from triage.knowledge.problems import compile_regex

KIND = "frames"
_KEYS = {"kind", "library", "examples"}
_SITE = regex_cache.compile(r"^.*?/(?:site|dist)-packages/")


@dataclass(frozen=True)
class LibraryFrames:
    pattern: regex.Pattern[str] | None = None

    def is_library(self, filename: str) -> bool:
        """Is a frame of this file library code (installed, standard library, no file)?"""
        if self.pattern is None:
            return False
        name = filename.replace("\\", "/")
        return bool(self.pattern.search(name) or self.pattern.search(_SITE.sub("", name)))


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
        parts.append(f"(?:{spec['pattern']})")
    frames = LibraryFrames(regex_cache.compile("|".join(parts)) if parts else None)
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
    return frames


def merge(values: Sequence[LibraryFrames]) -> LibraryFrames:
    return values[0] if values else LibraryFrames()
