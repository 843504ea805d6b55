"""The fleet's knowledge, as data: `rules/fleet/fleet.yaml` (signals, GPU names, the test).

`load()` checks the whole file and raises `FleetKnowledgeError` listing every problem, each
with its item, so one run shows all that is wrong; each signal's examples are run there too.
The file lives in a sub-folder of rules/ so the diagnosis rule loader leaves it alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex
import yaml

from triage import taxonomy

FILE = "fleet.yaml"
GPU_GROUPS = ("pci", "bus_id", "cuda_dev", "index", "rank")


class FleetKnowledgeError(Exception):
    def __init__(self, path: Path, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__(
            f"{len(self.problems)} problem(s) in {path}:\n"
            + "\n".join(f"  {p}" for p in self.problems)
        )


@dataclass(frozen=True)
class Signal:
    """A hardware-ish line: counted per host and GPU."""

    id: str
    label: str  # may hold `{code}`
    why: str
    patterns: tuple[regex.Pattern[str], ...]
    examples_match: tuple[str, ...] = ()
    examples_no_match: tuple[str, ...] = ()

    def search(self, text: str) -> regex.Match[str] | None:
        for pattern in self.patterns:
            m = pattern.search(text)
            if m is not None:
                return m
        return None


@dataclass(frozen=True)
class GpuName:
    """A line that says which GPU a rank runs on."""

    id: str
    pattern: regex.Pattern[str]
    examples_match: tuple[str, ...] = ()
    examples_no_match: tuple[str, ...] = ()


@dataclass(frozen=True)
class SuspectTest:
    test: str  # how the report names it
    alpha: float
    min_jobs: int
    min_culprit_jobs: int


@dataclass(frozen=True)
class FlaggedHostGroup:
    """How a failure on a flagged host with a hardware signal is grouped."""

    signals: tuple[str, ...]  # signal ids that count on that host, most specific first
    root_cause: str  # a taxonomy root-cause id
    mechanism: str  # the group's mechanism, `{signal}`: the first signal's label


@dataclass(frozen=True)
class FleetKnowledge:
    signals: tuple[Signal, ...]
    gpu_names: tuple[GpuName, ...]
    silent_label: str
    silent_why: str
    suspects: SuspectTest
    failure_outcomes: frozenset[str]
    group_examples: int
    flagged_host: FlaggedHostGroup | None = None


def default_path() -> Path:
    from triage.knowledge.locate import rules_dir

    return rules_dir() / "fleet" / FILE


def load(path: str | Path | None = None) -> FleetKnowledge:
    """Read and check the fleet knowledge (the shipped file unless `path`)."""
    where = Path(path) if path is not None else default_path()
    try:
        body = yaml.safe_load(where.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise FleetKnowledgeError(where, [f"cannot be read: {exc}"]) from exc
    problems: list[str] = []
    if not isinstance(body, Mapping) or body.get("kind") != "fleet":
        raise FleetKnowledgeError(where, ["is not a `kind: fleet` mapping"])
    signals = tuple(_signal(s, n, problems) for n, s in enumerate(_list(body, "signals", problems)))
    names = tuple(
        _gpu_name(s, n, problems) for n, s in enumerate(_list(body, "gpu_names", problems))
    )
    silent = body.get("silent_rank") or {}
    suspects = _suspects(body.get("suspects"), problems)
    outcomes = body.get("failure_outcomes")
    if not isinstance(outcomes, list) or not all(isinstance(o, str) for o in outcomes):
        problems.append("failure_outcomes: a list of outcome ids is needed")
        outcomes = []
    examples = (body.get("groups") or {}).get("examples", 3)
    if not isinstance(examples, int) or examples < 1:
        problems.append("groups.examples: a positive whole number is needed")
    flagged_host = _flagged_host(
        (body.get("groups") or {}).get("flagged_host"),
        {s.id for s in signals if s is not None},
        problems,
    )
    for item in (*signals, *names):
        if item is not None:
            problems += _example_problems(item)
    if problems:
        raise FleetKnowledgeError(where, problems)
    return FleetKnowledge(
        signals=tuple(s for s in signals if s is not None),
        gpu_names=tuple(g for g in names if g is not None),
        silent_label=str(silent.get("label", "rank silent while others waited")),
        silent_why=str(silent.get("why", "")),
        suspects=suspects,
        failure_outcomes=frozenset(outcomes),
        group_examples=int(examples),
        flagged_host=flagged_host,
    )


def _flagged_host(raw: Any, signal_ids: set[str], problems: list[str]) -> FlaggedHostGroup | None:
    if raw is None:
        return None
    where = "groups.flagged_host"
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: a mapping of signals, root_cause and mechanism is needed")
        return None
    signals = raw.get("signals")
    if not isinstance(signals, list) or not signals:
        problems.append(f"{where}.signals: a list of signal ids is needed")
        signals = []
    unknown = sorted(str(s) for s in signals if s not in signal_ids)
    if unknown:
        problems.append(f"{where}.signals: not a signal of this file: {', '.join(unknown)}")
    root = str(raw.get("root_cause", ""))
    if root not in taxonomy.load().root_causes:
        problems.append(f"{where}.root_cause: {root!r} is not a taxonomy root-cause id")
    mechanism = raw.get("mechanism")
    if not isinstance(mechanism, str) or "{signal}" not in mechanism:
        problems.append(f"{where}.mechanism: a short text naming `{{signal}}` is needed")
        mechanism = "{signal}"
    return FlaggedHostGroup(tuple(str(s) for s in signals), root, mechanism)


def _list(body: Mapping[str, Any], key: str, problems: list[str]) -> list[Any]:
    value = body.get(key)
    if not isinstance(value, list) or not value:
        problems.append(f"{key}: a non-empty list is needed")
        return []
    return value


def _compile(text: Any, item: str, problems: list[str]) -> regex.Pattern[str] | None:
    if not isinstance(text, str) or not text:
        problems.append(f"{item}: a pattern must be a non-empty string")
        return None
    try:
        compiled = regex.compile(text, regex.MULTILINE)
    except regex.error as exc:
        problems.append(f"{item}: pattern {text!r} does not compile ({exc})")
        return None
    unknown = set(compiled.groupindex) - {*GPU_GROUPS, "code"}
    if unknown:
        problems.append(f"{item}: unknown group(s) {sorted(unknown)}; known: {GPU_GROUPS}")
    return compiled


def _examples(entry: Mapping[str, Any], item: str, problems: list[str]) -> tuple[tuple, tuple]:
    ex = entry.get("examples") or {}
    match, no_match = ex.get("match") or [], ex.get("no_match") or []
    if not match or not no_match:
        problems.append(f"{item}: examples.match and examples.no_match are both needed")
    return tuple(str(x) for x in match), tuple(str(x) for x in no_match)


def _signal(entry: Any, n: int, problems: list[str]) -> Signal | None:
    if not isinstance(entry, Mapping) or not entry.get("id"):
        problems.append(f"signals[{n}]: a mapping with an `id` is needed")
        return None
    item = f"signal {entry['id']}"
    raw = entry.get("patterns")
    if not isinstance(raw, list) or not raw:
        problems.append(f"{item}: `patterns` must be a non-empty list")
        raw = []
    compiled = [_compile(p, item, problems) for p in raw]
    match, no_match = _examples(entry, item, problems)
    return Signal(
        id=str(entry["id"]),
        label=str(entry.get("label") or entry["id"]),
        why=str(entry.get("why") or ""),
        patterns=tuple(p for p in compiled if p is not None),
        examples_match=match,
        examples_no_match=no_match,
    )


def _gpu_name(entry: Any, n: int, problems: list[str]) -> GpuName | None:
    if not isinstance(entry, Mapping) or not entry.get("id"):
        problems.append(f"gpu_names[{n}]: a mapping with an `id` is needed")
        return None
    item = f"gpu_name {entry['id']}"
    compiled = _compile(entry.get("pattern"), item, problems)
    match, no_match = _examples(entry, item, problems)
    if compiled is None:
        return None
    return GpuName(str(entry["id"]), compiled, match, no_match)


def _suspects(entry: Any, problems: list[str]) -> SuspectTest:
    entry = entry if isinstance(entry, Mapping) else {}
    alpha = entry.get("alpha")
    if not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        problems.append("suspects.alpha: a number between 0 and 1 is needed")
        alpha = 0.01
    counts = {}
    for key in ("min_jobs", "min_culprit_jobs"):
        value = entry.get(key)
        if not isinstance(value, int) or value < 1:
            problems.append(f"suspects.{key}: a positive whole number is needed")
            value = 1
        counts[key] = value
    return SuspectTest(
        test=str(entry.get("test") or "one-sided binomial, Holm-corrected"),
        alpha=float(alpha),
        **counts,
    )


def _example_problems(item: Signal | GpuName) -> list[str]:
    search = item.search if isinstance(item, Signal) else item.pattern.search
    kind = "signal" if isinstance(item, Signal) else "gpu_name"
    out = [
        f"{kind} {item.id}: example does not match: {line!r}"
        for line in item.examples_match
        if search(line) is None
    ]
    out += [
        f"{kind} {item.id}: no_match example matches: {line!r}"
        for line in item.examples_no_match
        if search(line) is not None
    ]
    return out
