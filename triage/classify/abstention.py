"""Abstention: what the job's evidence already holds, and the sentence that names no cause and
says what to collect next (`rules/collect_next.yaml`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from triage import knowledge, taxonomy
from triage.classify import fusion
from triage.model import EventKind, OutcomeKind, RankExit, SourceKind

if TYPE_CHECKING:
    from triage.classify import Prepared


# What a failing program prints of its own failure. A launcher's account of it (torchrun's
# summary, DeepSpeed's `exits with return code`, `colossalai run`'s `failed to run`: agent,
# rank-exit and error-file events) says that a worker exited, and with what status, not why.
_PROGRAM_OUTPUT = frozenset(
    {
        EventKind.TRACEBACK,
        EventKind.CPP_EXCEPTION,
        EventKind.ERROR_LINE,
        EventKind.NCCL_WARN,
        EventKind.SIGNAL,
    }
)
_LAUNCHER_OUTPUT = frozenset({EventKind.AGENT, EventKind.RANK_EXIT, EventKind.ELASTIC_ERROR})


def failure_unlogged(prep: Prepared, kb: knowledge.Knowledge) -> str | None:
    """How the launcher reported a failed job whose logs hold nothing else of its failure (no
    traceback, error line or warning of the program, no rule that names a mechanism, no signal
    that ended a worker), e.g. "status 1"; None when the logs say more. Neighbours and the
    learned model would read only the launcher's words there (DeepSpeed's `sigkill_handler`
    `Killing subprocess`, printed for any failed worker, reads like the OOM killer's work)."""
    analysis = prep.analysis
    outcome = analysis.outcome
    if outcome is None or outcome.id is not OutcomeKind.FAILED or not outcome.evidence:
        return None
    # (source, first line, last line) of what the launcher printed
    launcher_spans: list[tuple[str, int, int]] = []
    for ps in prep.parsed:
        for ev in ps.events:
            if ev.kind in _PROGRAM_OUTPUT and kb.routine.which(ev.text) is None:
                if not _narrates_the_launch(ev.text, kb):
                    return None
            elif ev.kind not in _LAUNCHER_OUTPUT:
                continue
            if ev.line is not None:
                launcher_spans.append((ev.source, ev.line, ev.end_line or ev.line))
    # the outcome rests on the launcher's report alone (not a loss gone to NaN, a stop)
    for ref in outcome.evidence:
        if not any(
            src == ref.source and ref.line is not None and first <= ref.line <= last
            for src, first, last in launcher_spans
        ):
            return None
    cascade_rules = kb.cascade.rules
    if any(
        hit.symptom and not hit.generic and hit.rule_id not in cascade_rules for hit in prep.hits
    ):
        return None
    exits: list[RankExit] = list(analysis.rank_exits)
    for e in exits:
        # a signal is a fact of the failure (SIGKILL, SIGSEGV, ...): torchrun reports one as
        # -N, a shell or a launcher that passes a shell's status on as 128 + N
        code = e.exitcode
        if e.signal is not None or (code is not None and (code < 0 or 128 < code < 160)):
            return None
        # the worker's own error, carried by its exit record (not torchrun's note of how to
        # get one, `To enable traceback see ...`, for a worker run without `@record`)
        if e.message and not _narrates_the_launch(e.message, kb):
            return None
    codes = sorted({e.exitcode for e in exits if e.exitcode is not None})
    if not codes:
        return "an error"
    return "status " + ", ".join(str(c) for c in codes)


def _narrates_the_launch(text: str, kb: knowledge.Knowledge) -> bool:
    """Does this error event only narrate what the launcher did (its last line is one of the
    cascade file's `context` lines: torchrun's own `ChildFailedError` traceback, its `Root
    Cause` heading)? A spawn re-raise ends with the child's error, which is no narration."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    context = kb.cascade.context
    return bool(lines) and context is not None and context.search(lines[-1]) is not None


def situation(prep: Prepared, unlogged: bool = False) -> knowledge.Situation:
    """What this job's evidence holds, for the collect-next advice (`rules/collect_next.yaml`);
    `unlogged`: the failure is known only from a launcher's report (`failure_unlogged`)."""
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
        failure_unlogged=unlogged,
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


def unlogged_reason(
    prep: Prepared, reported: str, advice: knowledge.CollectNext | None = None
) -> str:
    """The abstention of a failed job whose logs hold only the launcher's word of it."""
    advice = advice if advice is not None else knowledge.shipped().collect_next
    guess = (
        f" (the logs hold only the launcher's report that a worker exited with {reported}, "
        "none of the workers' own output about the failure)"
    )
    return not_enough(advice.asks(situation(prep, unlogged=True)), guess)


def not_enough(asks: Sequence[str], guess: str = "") -> str:
    """The abstention sentence: no cause named, and what to collect next."""
    return f"Not enough evidence to name a cause{guess}. Collect next: " + "; ".join(asks) + "."
