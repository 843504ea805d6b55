"""The message shapes the log parser reads facts from (`kind: log_shapes`).

    kind: log_shapes
    message_tails: [prefix, ...]     # a line starting with one continues an exception message
    facts:                           # searched in an error's message
      watchdog_timeout: {pattern: '...(?P<op>...)...', guard: [WorkNCCL(],
                         examples: {match: [...], no_match: [...]}}
      ...
    progress:                        # searched in a line that holds a progress word
      megatron: {pattern: '...(?P<step>...)...', guard: [iteration], examples: ...}
      ...

Each slot is one the parser (`triage.parsers.rank_log`) reads, with the named groups it reads
(checked here); patterns are Python `re`, the parser's engine. A `guard` lists literals
(case-sensitive) a text must hold, every one, before the pattern is searched in it: most lines
hold none, and a substring test is far cheaper than a search. Every `match` example must hold
the whole guard (else the guard would hide what the pattern is for). Shipped only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from triage import regex_cache
from triage.knowledge.problems import check_examples

KIND = "log_shapes"
_KEYS = {"kind", "message_tails", "facts", "progress"}
_SLOT_KEYS = {"pattern", "guard", "examples"}
# slot -> the named groups the parser reads from its match
FACTS: dict[str, frozenset[str]] = {
    "watchdog_timeout": frozenset({"seq", "op", "nin", "nout", "timeout", "ran"}),
    "watchdog_summary": frozenset({"seq", "enq", "comp"}),
    "watchdog_stuck": frozenset({"sec"}),
    "dump_from": frozenset({"src"}),
    "gloo_timeout": frozenset({"ms", "op"}),
    "nccl_error_in": frozenset({"reason", "ver"}),
    "pg_prefix": frozenset({"pgid", "guid", "desc", "rank"}),
    "rank_tag": frozenset({"rank"}),
    "tagged_rank": frozenset({"rank"}),
    "watchdog_terminated": frozenset(),
}
PROGRESS: dict[str, frozenset[str]] = {
    "megatron": frozenset({"step", "total"}),
    "deepspeed": frozenset({"rank", "step"}),
    "hf": frozenset({"epoch"}),
    "tqdm": frozenset({"step", "total"}),
    "setup_bar": frozenset(),
    "not_progress": frozenset(),
    "step": frozenset({"step", "total"}),
    "bar_step": frozenset({"step"}),
    "iteration": frozenset({"step", "total"}),
    "epoch": frozenset({"epoch"}),
    "sample_epoch": frozenset({"epoch", "step", "total"}),
    "epoch_step": frozenset({"epoch", "epochs", "step", "total"}),
}
_NEVER = re.compile(r"(?!)")  # a slot whose pattern is broken (reported): matches nothing


@dataclass(frozen=True, eq=False)  # hashed by identity: one per load
class LogShapes:
    message_tails: tuple[str, ...]
    facts: Mapping[str, re.Pattern[str]]  # every slot of FACTS
    progress: Mapping[str, re.Pattern[str]]  # every slot of PROGRESS
    # slot -> the literals a text must all hold before the slot's pattern is searched in it
    fact_guards: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    progress_guards: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> LogShapes:
    unknown = set(body) - _KEYS
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS - {'kind'})}")
    tails = body.get("message_tails")
    if not isinstance(tails, list) or not tails or not all(isinstance(t, str) and t for t in tails):
        report("message_tails", "needs a list of line prefixes")
        tails = []
    facts, fact_guards = _slots(body.get("facts"), FACTS, "facts", report)
    progress, progress_guards = _slots(body.get("progress"), PROGRESS, "progress", report)
    return LogShapes(tuple(tails), facts, progress, fact_guards, progress_guards)


def _slots(
    raw: Any,
    slots: Mapping[str, frozenset[str]],
    section: str,
    report: Callable[[str, str], None],
) -> tuple[dict[str, re.Pattern[str]], dict[str, tuple[str, ...]]]:
    raw = raw if isinstance(raw, dict) else {}
    if set(raw) != set(slots):
        report(section, f"needs exactly {sorted(slots)}")
    out: dict[str, re.Pattern[str]] = {}
    guards: dict[str, tuple[str, ...]] = {}
    for slot, groups in slots.items():
        item = f"{section} {slot}"
        entry = raw.get(slot)
        text = entry.get("pattern") if isinstance(entry, dict) else None
        out[slot] = _NEVER
        if isinstance(entry, dict):
            unknown = set(entry) - _SLOT_KEYS
            if unknown:
                report(item, f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_SLOT_KEYS)}")
            guards[slot] = _guard(entry, item, report)
        if not isinstance(text, str) or not text:
            report(item, "needs a pattern")
            continue
        try:
            pattern = regex_cache.compile_std(text)
        except re.error as exc:
            report(item, f"bad regex: {exc}")
            continue
        missing = groups - set(pattern.groupindex)
        if missing:
            report(item, f"needs the named group(s) {sorted(missing)}")
            continue
        check_examples(pattern, entry.get("examples"), item, report)
        out[slot] = pattern
    return out, guards


def _guard(
    entry: Mapping[str, Any], item: str, report: Callable[[str, str], None]
) -> tuple[str, ...]:
    """A slot's guard literals; () (search every text) when it has none."""
    raw = entry.get("guard", [])
    if not isinstance(raw, list) or not all(isinstance(g, str) and g for g in raw):
        report(item, "`guard` must be a list of non-empty literals")
        return ()
    examples = entry.get("examples")
    matches = examples.get("match") or [] if isinstance(examples, Mapping) else []
    for line in matches:
        missing = [g for g in raw if isinstance(line, str) and g not in line]
        if missing:
            report(item, f"guard {missing} is not in its example {line!r}: it would never be read")
    return tuple(raw)


def holds(text: str, guard: tuple[str, ...]) -> bool:
    """Whether a text holds every literal of a slot's guard (then its pattern is searched)."""
    # a plain loop, not all(...): it runs several times for every progress line of a log
    for literal in guard:  # noqa: SIM110
        if literal not in text:
            return False
    return True


def merge(values: Sequence[LogShapes]) -> LogShapes:
    return values[0] if values else LogShapes((), {}, {})
