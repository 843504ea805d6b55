"""What a report calls things: its titles and the names of outcomes and inputs, in one place."""

from __future__ import annotations

from collections.abc import Sequence

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
