"""The culprit vote's table (`kind: culprit`): which signals say "this rank started it", how much.

    kind: culprit
    min_score: 1.0          # a rank below this is never named
    co_culprit: 0.7         # ranks within this share of the best score are named beside it
    first_window_s: 1.0     # errors this close to the earliest one count as "first"
    strength: {default: 1.0, nccl_warn: 0.6, error_line: 0.7, marker: 0.5}
    groups:                 # signals of one analysis: a rank gets its best one, one reason
      flight_recorder: "flight recorder: behind, missing or odd one out"
    signals:
      named_by_peers: {weight: 2.5, per: 0.5, cap: 3.5, reason: "named by {n} ..."}
      fr_missing_dump: {weight: 3.0, group: flight_recorder}

A signal's vote is `weight`, or `weight + per * n` capped at `cap` for a signal that counts
messages (`per` alone: `per * n`). `initiating_error` is scaled by the event's strength.
The analysis emits the signal ids of `SIGNALS`; the table must weigh each of them once, and
`bench/culprit_table.py` checks it against every real bundle. Shipped only.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

KIND = "culprit"

# every signal the analysis can emit, with the fields its reason may name
SIGNALS: dict[str, frozenset[str]] = {
    "initiating_error": frozenset(),
    "first_on_timeline": frozenset(),
    "named_by_peers": frozenset({"n"}),
    "peer_host": frozenset({"n", "host"}),
    "exit_self_inflicted": frozenset({"code", "meaning"}),
    "exit_without_message": frozenset({"code"}),
    "fr_missing_dump": frozenset(),
    "fr_lagging_few": frozenset(),
    "fr_lagging_many": frozenset(),
    "fr_not_started": frozenset(),
    "fr_mismatch_odd": frozenset(),
    "fr_mismatch_tie": frozenset(),
    "stack_outside_collective_few": frozenset(),
    "stack_outside_collective_half": frozenset(),
    "stack_elsewhere": frozenset(),
    "progress_behind_few": frozenset(),
    "progress_behind_many": frozenset(),
    "progress_ahead_few": frozenset(),
    "progress_ahead_many": frozenset(),
    "progress_non_finite": frozenset(),
    "settings_minority": frozenset(),
    "silent_alone": frozenset(),
    "silent_beside_errors": frozenset(),
    "silent_beside_unnamed_error": frozenset(),
    "never_joined": frozenset(),
}
_STRENGTHS = ("default", "nccl_warn", "error_line", "marker")
_KEYS = {"kind", "min_score", "co_culprit", "first_window_s", "strength", "groups", "signals"}
_SIGNAL_KEYS = {"weight", "per", "cap", "reason", "group", "why"}


@dataclass(frozen=True)
class Signal:
    id: str
    weight: float
    reason: str  # a format string over the signal's fields (`SIGNALS`)
    per: float = 0.0  # added per counted message
    cap: float | None = None
    group: str | None = None  # signals of one group: a rank gets the best one

    def vote(self, n: int = 0, scale: float = 1.0) -> float:
        w = (self.weight + self.per * n) * scale
        return min(self.cap, w) if self.cap is not None else w


@dataclass(frozen=True)
class Strength:
    """How much one initiating event alone says "this rank started it"."""

    default: float = 1.0
    nccl_warn: float = 1.0
    error_line: float = 1.0
    marker: float = 0.0  # added when a rule marks the line as initiating


@dataclass(frozen=True)
class CulpritTable:
    min_score: float = 1.0
    co_culprit: float = 0.7
    first_window_s: float = 1.0
    strength: Strength = field(default_factory=Strength)
    signals: Mapping[str, Signal] = field(default_factory=dict)


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> CulpritTable:
    unknown = set(body) - _KEYS
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS - {'kind'})}")
    min_score = _number(body, "min_score", report, low=0.0)
    co_culprit = _number(body, "co_culprit", report, low=0.0, high=1.0)
    window = _number(body, "first_window_s", report, low=0.0)
    raw_strength = body.get("strength")
    strengths: dict[str, float] = {}
    if not isinstance(raw_strength, dict) or set(raw_strength) != set(_STRENGTHS):
        report("strength", f"needs exactly {list(_STRENGTHS)}")
    else:
        strengths = {k: _number(raw_strength, k, report, low=0.0) for k in _STRENGTHS}
    groups = body.get("groups") or {}
    if not isinstance(groups, dict) or not all(isinstance(v, str) for v in groups.values()):
        report("groups", "must map a group name to its reason")
        groups = {}
    signals: dict[str, Signal] = {}
    raw = body.get("signals")
    if not isinstance(raw, dict):
        report("signals", "needs a mapping of signal id to its weight")
        raw = {}
    for sid, spec in raw.items():
        signal = _signal(str(sid), spec, groups, lambda m, s=sid: report(f"signal {s!r}", m))
        if signal is not None:
            signals[signal.id] = signal
    for sid in sorted(set(SIGNALS) - set(raw)):
        report(f"signal {sid!r}", "the analysis emits it but the table does not weigh it")
    used = {s.group for s in signals.values() if s.group}
    for name in sorted(set(groups) - used):
        report(f"group {name!r}", "no signal belongs to it")
    return CulpritTable(
        min_score=min_score,
        co_culprit=co_culprit,
        first_window_s=window,
        strength=Strength(**strengths) if strengths else Strength(),
        signals=signals,
    )


def _signal(
    sid: str, spec: Any, groups: Mapping[str, str], report: Callable[[str], None]
) -> Signal | None:
    if sid not in SIGNALS:
        report(f"unknown signal; the analysis emits {sorted(SIGNALS)}")
        return None
    if not isinstance(spec, dict):
        report("needs weight and reason (or group)")
        return None
    unknown = set(spec) - _SIGNAL_KEYS
    if unknown:
        report(f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_SIGNAL_KEYS)}")
    weight = _number(spec, "weight", lambda _i, m: report(m), low=0.0)
    per = _number(spec, "per", lambda _i, m: report(m), low=0.0, default=0.0)
    cap = spec.get("cap")
    if cap is not None and (not isinstance(cap, int | float) or cap < weight):
        report("cap must be a number at least the weight")
        cap = None
    group = spec.get("group")
    if group is not None:
        if group not in groups:
            report(f"group {group!r} is not in groups")
            return None
        if "reason" in spec:
            report("a grouped signal gives its group's reason; remove `reason`")
        reason = groups[group]
    else:
        reason = spec.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            report("needs a reason (what the report says of the rank)")
            return None
    names = {f for _, f, _, _ in string.Formatter().parse(reason) if f}
    if names - SIGNALS[sid]:
        report(f"reason names {sorted(names - SIGNALS[sid])}; it may name {sorted(SIGNALS[sid])}")
        return None
    if not spec.get("why"):
        report("needs `why`: the evidence behind the weight")
    return Signal(sid, weight, reason, per, float(cap) if cap is not None else None, group)


def _number(
    body: Mapping[str, Any],
    key: str,
    report: Callable[[str, str], None],
    *,
    low: float,
    high: float | None = None,
    default: float | None = None,
) -> float:
    value = body.get(key, default)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value < low
        or (high is not None and value > high)
    ):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        report(key, f"needs a number {bound}")
        return float(default if default is not None else low)
    return float(value)


def merge(values: Sequence[CulpritTable]) -> CulpritTable:
    return values[0] if values else CulpritTable()
