"""How a diagnosis says what happened, in one sentence: a failure (what, why, who started it),
a job that ended well, a job whose logs hold a fault besides its outcome, and a folder with
nothing to read. The pipeline asks; every summary's words are here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from triage.model import Analysis, Classification, Outcome, OutcomeKind, ScoredLabel
from triage.rank_ranges import ranks_text
from triage.report.common import lower_first, pct, tied_at_top

if TYPE_CHECKING:
    from triage.knowledge import Knowledge

# How a summary names each outcome.
_OUTCOME_WORDS = {
    OutcomeKind.SUCCEEDED: "The job finished",
    OutcomeKind.STOPPED: "The job was stopped on purpose",
    OutcomeKind.INCOMPLETE: "No end in the logs",
    OutcomeKind.FAILED: "The job failed",
    OutcomeKind.HUNG: "The job hung",
    OutcomeKind.UNKNOWN: "The job's end is unknown",
}


def ended_well(outcome: Outcome) -> str:
    """A job that ended well (or was stopped, or still ran) with no fault in its logs."""
    return f"{_OUTCOME_WORDS[outcome.id]}: {lower_first(outcome.why)}."


def fault_besides(outcome: Outcome, summary: str) -> str:
    """The outcome first, then the fault its logs hold (`summary`)."""
    return f"{_OUTCOME_WORDS[outcome.id]} ({outcome.why}), but its logs hold a fault: {summary}"


def nothing_to_read(inputs: int, asks: Sequence[str]) -> str:
    """A bundle of `inputs` inputs in which nothing could be diagnosed, and what to collect."""
    if not inputs:
        where = "nothing was read"
    elif inputs == 1:
        where = "the input holds no"
    else:
        where = f"none of the {inputs} inputs holds a"
    what = "log line, traceback, py-spy or flight-recorder dump triage can read"
    said = f"{where}: {what}" if not inputs else f"{where} {what}"
    return f"No evidence found: {said}. Collect: " + "; ".join(asks) + "."


def summarize(labels: Classification, found: Analysis, kb: Knowledge | None = None) -> str:
    """One sentence: what happened, why, and who started it (`kb`'s collect-next advice,
    None: the shipped one, when nothing is known)."""
    if not labels.symptoms and not labels.root_causes:
        if labels.abstain_reason:
            return labels.abstain_reason
        from triage import knowledge
        from triage.classify.abstention import not_enough

        # nothing known about the evidence: every ask of the collect-next advice
        advice = (kb if kb is not None else knowledge.shipped()).collect_next
        return not_enough(advice.asks(knowledge.Situation()))
    parts: list[str] = []
    if labels.symptoms:
        parts.append(_with_ties(labels.symptoms))
    if labels.root_causes:
        # a cause right less often than not, or one no rule names, is a guess and said to be
        sure = not labels.cause_open
        lead = "most likely cause" if sure else "cause unsettled, best guess"
        parts.append(f"{lead}: {_with_ties(labels.root_causes, lower=True)}")
    sentence = "; ".join(parts)
    who = _who(found)
    return f"{sentence}{who}."


def _with_ties(labels: Sequence[ScoredLabel], lower: bool = False) -> str:
    """The first label, and those the report's tables show at its percentage: naming the first
    alone would make a choice the scores do not make."""
    first, *tied = tied_at_top(labels)
    said = _label_phrase(first, lower)
    return "".join([said, *(f", tied with {_label_phrase(x, lower=True)}" for x in tied)])


def _label_phrase(label: ScoredLabel, lower: bool = False) -> str:
    name = label.name[0].lower() + label.name[1:] if lower else label.name
    # a calibrated score is never certainty: shown as the tables show it, 99% at most
    return f"{name} ({label.id}, {pct(label.score)})"


def _who(found: Analysis) -> str:
    if found.hang is not None and found.hang.detected and found.hang.lagging_ranks:
        where = ""
        if found.hang.collective and found.hang.collective.op:
            where = f" at {found.hang.collective.op}"
        return f"; the job hung{where}, started by {_ranks(found.hang.lagging_ranks)}"
    if found.culprit_ranks:
        return f"; started by {_ranks(found.culprit_ranks)}"
    return ""


def _ranks(ranks: Sequence[int]) -> str:
    """`rank 2`, `ranks 0-7`, `ranks 1, 3, 5-7`: the noun agrees with the count, and the list
    is folded as the report's culprit line folds it (the sentence said `ranks 0, 1, 2, 3, 4,
    5, 6, 7` beside a culprit line of `ranks 0-7`)."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ranks_text(ranks, limit=32)
