"""Progress divergence: the last step / iteration / epoch each rank logged.

In data-parallel training every rank runs the same steps, so at the moment of a hang they
all logged about the same last step. A rank that is behind (stuck in the step the others
finished) or ahead (it skipped a collective the others still wait in) is a suspect.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from triage.analysis.ranks import format_ranks, ref
from triage.model import (
    Event,
    EventKind,
    Finding,
    FindingKind,
    ParsedSource,
    ProgressDivergenceFacts,
    ProgressFacts,
    SourceKind,
)


@dataclass
class ProgressAnalysis:
    last: dict[int, tuple[str, float]] = field(default_factory=dict)  # rank -> (unit, value)
    events: dict[int, Event] = field(default_factory=dict)
    behind: tuple[int, ...] = ()
    ahead: tuple[int, ...] = ()
    non_finite: tuple[int, ...] = ()  # ranks whose own last metrics went nan/inf first
    findings: list[Finding] = field(default_factory=list)
    # rank -> the culprit signal it gave (`rules/culprit.yaml`, group progress); a step
    # divergence replaces a non-finite vote of the same rank
    suspects: dict[int, set[str]] = field(default_factory=dict)


def _value(ev: Event) -> tuple[str, float] | None:
    """The rank's progress: its step, else its epoch."""
    progress = ev.payload
    if not isinstance(progress, ProgressFacts):
        return None
    if progress.step is not None:
        return "step", float(progress.step)
    if progress.epoch is not None:
        return "epoch", float(progress.epoch)
    return None


def analyze(progress: Iterable[tuple[int, Event]]) -> ProgressAnalysis:
    out = ProgressAnalysis()
    for rank, ev in progress:
        got = _value(ev)
        if got is None:
            continue
        old = out.last.get(rank)
        # a rank may log the epoch and the step; compare like with like, prefer steps
        if (
            old is None
            or (old[0] == got[0] and got[1] > old[1])
            or _rank_unit(got[0]) < _rank_unit(old[0])
        ):
            out.last[rank] = got
            out.events[rank] = ev
    if len(out.last) < 2:
        return out
    _non_finite(out)
    units = Counter(u for u, _ in out.last.values())
    unit = units.most_common(1)[0][0]
    values = {r: v for r, (u, v) in out.last.items() if u == unit}
    if len(values) < 2 or len(set(values.values())) < 2:
        return out
    counts = Counter(values.values())
    mode, n_mode = counts.most_common(1)[0]
    # Ranks log every N steps and stop at slightly different moments; only a clear majority
    # at one step, with a few ranks off it, is a divergence worth blaming anyone for.
    if n_mode * 2 <= len(values) or (len(values) - n_mode) > max(1, len(values) // 4):
        return out
    out.behind = tuple(sorted(r for r, v in values.items() if v < mode))
    out.ahead = tuple(sorted(r for r, v in values.items() if v > mode))
    for r in out.behind:
        few = len(out.behind) * 2 < len(values)
        out.suspects[r] = {"progress_behind_few" if few else "progress_behind_many"}
    for r in out.ahead:
        few = len(out.ahead) * 2 < len(values)
        out.suspects[r] = {"progress_ahead_few" if few else "progress_ahead_many"}
    for group, word in ((out.behind, "behind"), (out.ahead, "ahead of")):
        if not group:
            continue
        shown = ", ".join(f"rank {r}: {unit} {values[r]:g}" for r in group[:6])
        out.findings.append(
            Finding(
                kind=FindingKind.PROGRESS_DIVERGENCE,
                summary=(
                    f"rank(s) {format_ranks(group)} are {word} the others: last {unit} logged "
                    f"{shown} vs {mode:g} on {counts[mode]} rank(s)"
                ),
                ranks=group,
                evidence=tuple(ref(out.events[r], r) for r in list(group)[:4]),
                facts=ProgressDivergenceFacts(unit=unit, majority=mode, last=dict(values)),
            )
        )
    return out


def _non_finite(out: ProgressAnalysis) -> None:
    """The rank whose *own* metric went NaN while the others' stayed finite started it: an
    all-reduce then spreads the NaN, and every rank fails on the same step."""
    bad: dict[int, float] = {}
    for rank, ev in out.events.items():
        if isinstance(ev.payload, ProgressFacts) and ev.payload.non_finite:
            bad[rank] = out.last[rank][1]
    if not bad or len(bad) * 2 >= len(out.events):
        return
    first = min(bad.values())
    out.non_finite = tuple(sorted(r for r, v in bad.items() if v == first))
    for r in out.non_finite:
        out.suspects.setdefault(r, set()).add("progress_non_finite")
    unit = out.last[out.non_finite[0]][0]
    out.findings.append(
        Finding(
            kind=FindingKind.PROGRESS_DIVERGENCE,
            summary=(
                f"rank(s) {format_ranks(out.non_finite)} logged a non-finite value at {unit} "
                f"{first:g} while the other {len(out.events) - len(bad)} rank(s) stayed finite: "
                "the NaN/inf started there and the collectives spread it"
            ),
            ranks=out.non_finite,
            evidence=tuple(ref(out.events[r], r) for r in out.non_finite[:4]),
            facts=ProgressDivergenceFacts(unit=unit, step=first, non_finite=tuple(out.non_finite)),
        )
    )


def _rank_unit(unit: str) -> int:
    return {"step": 0, "global_step": 0, "iteration": 1, "epoch": 2}.get(unit, 3)


def loss_diverged(parsed: Sequence[ParsedSource]) -> list[Finding]:
    """Every stream that logged progress last reported its loss as nan or inf: the training
    diverged and went on stepping (or the log ends there), whatever else it printed. A
    healthy fp16 run skips the steps its loss scaling overflows on and reports a finite loss;
    a loss printed as NaN on the last step means the forward pass itself produced it."""
    last: dict[tuple[str, int | None], Event] = {}
    for ps in parsed:
        if ps.source.kind is SourceKind.TEXT:
            continue  # a note's prose quoting a loss is no stream of the job
        for ev in ps.events:
            if ev.kind is EventKind.PROGRESS and isinstance(ev.payload, ProgressFacts):
                key = (ev.source, ev.rank)
                old = last.get(key)
                if old is None or (ev.line or 0) > (old.line or 0):
                    last[key] = ev
    bad = [
        ev
        for ev in last.values()
        if isinstance(ev.payload, ProgressFacts) and ev.payload.loss_non_finite
    ]
    if not bad or len(bad) < len(last):
        return []
    ranks = tuple(sorted({ev.rank for ev in bad if ev.rank is not None}))
    steps = [ev.payload.step for ev in bad if isinstance(ev.payload, ProgressFacts)]
    step = min((s for s in steps if s is not None), default=None)
    at = f" at step {step}" if step is not None else ""
    who = f"rank(s) {format_ranks(ranks)}" if ranks else "the training loop"
    return [
        Finding(
            kind=FindingKind.PROGRESS_DIVERGENCE,
            summary=(
                f"{who} reported the loss as nan/inf on the last logged progress line{at}: "
                "the training diverged"
            ),
            ranks=ranks,
            evidence=tuple(ref(ev, ev.rank) for ev in bad[:4]),
            facts=ProgressDivergenceFacts(
                unit="step",
                step=float(step) if step is not None else None,
                loss_diverged=True,
            ),
        )
    ]
