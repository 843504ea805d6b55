"""What a report calls things: its titles and the names of outcomes and inputs, in one place."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from triage.model import OutcomeKind, SourceKind

from . import common as c

ABSTAIN_TITLE = "Not enough evidence for a diagnosis"
NO_EVIDENCE_TITLE = "No evidence found"


# What each outcome is called in a report's first line, and the style it is shown in.
OUTCOME_WORDS = {
    OutcomeKind.SUCCEEDED: "Finished",
    OutcomeKind.STOPPED: "Stopped on purpose",
    OutcomeKind.FAILED: "Failed",
    OutcomeKind.HUNG: "Hung",
    OutcomeKind.INCOMPLETE: "Still running when the logs end",
    OutcomeKind.UNKNOWN: "End not known",
}


# What a report calls an input of each kind, where "log" would be wrong.
KIND_NOUN = {
    SourceKind.FLIGHT_RECORDER: "flight-recorder dump",
    SourceKind.PYSPY: "py-spy dump",
    SourceKind.ELASTIC_ERROR: "error file",
    SourceKind.ENV_REPORT: "environment report",
}


def ranks_phrase(ranks: Sequence[int]) -> str:
    if not ranks:
        return "no rank"
    noun = "rank" if len(ranks) == 1 else "ranks"
    return f"{noun} {c.ranks_str(ranks)}"


@dataclass(frozen=True)
class Titles:
    """The report's section titles, the same in the terminal, Markdown and HTML."""

    collect_next: str = "What to collect next"
    fixes: str = "What to do"
    details: str = "Details"
    who: str = "Who"
    first_failure: str = "First failure"
    evidence: str = "Evidence"
    stacks: str = "Stacks (py-spy)"
    flight_recorder: str = "Flight recorder: last collective per rank"
    flight_recorder_short: str = "Flight recorder"  # HTML: its note says the rest
    similar: str = "Similar cases"
    findings: str = "Findings"
    timeline: str = "What happened, in order"
    inputs: str = "Inputs"


TITLES = Titles()
