"""Abstention: what the job's evidence already holds, and the sentence that names no cause and
says what to collect next (`rules/collect_next.yaml`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from triage import knowledge, taxonomy
from triage.classify import fusion
from triage.model import EventKind, SourceKind

if TYPE_CHECKING:
    from triage.classify import Prepared


def situation(prep: Prepared) -> knowledge.Situation:
    """What this job's evidence holds, for the collect-next advice (`rules/collect_next.yaml`)."""
    kinds = {ps.source.kind.value for ps in prep.parsed}
    nccl_events = {EventKind.NCCL_INFO, EventKind.NCCL_WARN}
    if any(ev.kind in nccl_events for ps in prep.parsed for ev in ps.events):
        kinds.add(SourceKind.NCCL.value)  # NCCL lines inside the logs are NCCL's account too
    analysis = prep.analysis
    source_ranks = analysis.facts.source_ranks
    ranks = {
        ps.source.rank if ps.source.rank is not None else source_ranks.get(ps.source.path)
        for ps in prep.parsed
    }
    hang = analysis.hang is not None and analysis.hang.detected
    stuck = None
    if analysis.hang is not None and analysis.hang.lagging_ranks:
        stuck = analysis.hang.lagging_ranks[0]
    elif analysis.culprit_ranks:
        stuck = analysis.culprit_ranks[0]
    return knowledge.Situation(
        kinds=frozenset(kinds),
        inputs=len(prep.parsed),
        ranks=len(ranks - {None}),
        hang=hang,
        stuck_rank=stuck,
        stuck_in_setup=analysis.facts.stuck_in_setup,
    )


def abstain_reason(
    prep: Prepared,
    result: dict[str, list[fusion.Scored]],
    abstain_below: float,
    advice: knowledge.CollectNext | None = None,
) -> str:
    """What to collect next, given what this job's evidence already has."""
    advice = advice if advice is not None else knowledge.shipped().collect_next
    best = [r[0] for r in (result["symptom"], result["root_cause"]) if r]
    guess = ""
    if best:
        tax = taxonomy.load()
        b = max(best, key=lambda s: s.score)
        name = f"{b.label} {tax.get(b.label).name}"
        if b.score < abstain_below:
            # as many digits as it takes for the smaller number to read smaller
            digits = next(
                (d for d in (0, 1, 2) if round(b.score, d + 2) < round(abstain_below, d + 2)), 3
            )
            guess = (
                f" (best guess {name}: {b.score:.{digits}%}, below the "
                f"{abstain_below:.{digits}%} needed)"
            )
        else:
            # scored high enough, but nothing backs it (`should_abstain`): "12% < 8%" would
            # contradict itself
            guess = (
                f" (best guess {name}: {b.score:.0%}, but no rule matched and no reference "
                "case is close)"
            )
    return not_enough(advice.asks(situation(prep)), guess)


def not_enough(asks: Sequence[str], guess: str = "") -> str:
    """The abstention sentence: no cause named, and what to collect next."""
    return f"Not enough evidence to name a cause{guess}. Collect next: " + "; ".join(asks) + "."
