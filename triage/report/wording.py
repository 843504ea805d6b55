"""What a report calls things: its titles and the names of outcomes and inputs, in one place."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from triage.model import OutcomeKind, SourceKind

from . import common as c

ABSTAIN_TITLE = "Not enough evidence for a diagnosis"
NO_EVIDENCE_TITLE = "No evidence found"
# an input group's status (report.view) as every format writes it
INPUT_STATUS_WORDS = {
    "problem": "could not be read",
    "empty": "empty",
    "set aside": "set aside",
    "read": "read",
}


# What each outcome is called in a report's first line, and the style it is shown in.
OUTCOME_WORDS = {
    OutcomeKind.SUCCEEDED: "Finished",
    OutcomeKind.STOPPED: "Stopped on purpose",
    OutcomeKind.FAILED: "Failed",
    OutcomeKind.HUNG: "Hung",
    OutcomeKind.INCOMPLETE: "No end in the logs",
    OutcomeKind.UNKNOWN: "End not known",
}


# What a report calls an input of each kind, where "log" would be wrong.
_KIND_NOUN = {
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
    singled_out: str = "Started by"  # a culprit's record, where no error of its own started it
    evidence: str = "Evidence"
    stacks: str = "Stacks (py-spy)"
    flight_recorder: str = "Flight recorder: last collective per rank"
    flight_recorder_short: str = "Flight recorder"  # HTML: its note says the rest
    similar: str = "Similar cases"
    findings: str = "Findings"
    timeline: str = "What happened, in order"
    inputs: str = "Inputs"


TITLES = Titles()


# beside a dump's name, over evidence that is no line of it: a record triage decoded and put
# into words (a flight-recorder entry, a py-spy stack)
RECORD_MARK = "a record of it, in triage's words"


def by_no_rank(ranks: str) -> str:
    """Why a first failure of `ranks` ("2", "2-3") is a line of a shared log that no rank
    printed."""
    if "-" in ranks or "," in ranks:
        return (
            f"a line of the job's log, by no rank: ranks {ranks} printed nothing of their "
            "own; this line shows them missing"
        )
    return (
        f"a line of the job's log, by no rank: rank {ranks} printed nothing of its "
        "own; this line shows it missing"
    )


def singled_out(rank: int, kind: SourceKind | None, failed_first: tuple[int, str] | None) -> str:
    """Why rank `rank` is quoted by a record, not an error: which rank failed first, where."""
    noun = _KIND_NOUN.get(kind, "log") if kind is not None else "evidence"
    said = f"rank {rank} printed no error that started it: this record of its {noun} singles it out"
    if failed_first is not None and failed_first[0] != rank:
        said += f"; rank {failed_first[0]} failed first ({failed_first[1]})"
    return said


def reported_the_wait(rank: int) -> str:
    """Why the first failure names no rank though rank `rank` printed it: the line is its
    report of a wait (a watchdog's timeout), a consequence, not a failure of its own."""
    return (
        f"the first error in the logs is rank {rank}'s report of its own wait: who failed, or "
        "never arrived, is not in them"
    )


def quoted_from(source_rank: int, kind: SourceKind, rank: int) -> str:
    """Why rank `rank`'s first failure is quoted from rank `source_rank`'s input."""
    noun = _KIND_NOUN.get(kind, "log")
    if kind is SourceKind.FLIGHT_RECORDER:
        return (
            f"quoted from rank {source_rank}'s {noun}: compared with the other ranks' dumps, "
            f"it shows rank {rank} out of step"
        )
    return f"quoted from rank {source_rank}'s {noun}, which reports it about rank {rank}"


def hang_headline(
    lagging: Sequence[int],
    op: str | None,
    seq: object | None,
    pg: str | None,
    waiter: str = "",
    elsewhere: Sequence[int] = (),
) -> str:
    """The hang in one line: `rank 3 behind; the others waited in all_reduce #57 on pg 0`;
    `waiter` names who waited where no rank had started (`the launcher`); `elsewhere`, the
    lagging ranks whose own record reached #57 with another collective (not behind:
    `rank 2 issued another collective at #57; ...`)."""
    where = f" in {op}" + (f" #{seq}" if seq is not None else "") if op else ""
    on = f" on process group {pg}" if pg else ""
    if not lagging:
        return f"{waiter or 'the ranks'} waited{where}{on}"
    one = len(lagging) == 1
    waited = f"waited{where}{on}" if where or on else f"waited for {'it' if one else 'them'}"
    short = [r for r in lagging if r not in elsewhere]
    who = []
    if elsewhere:
        who.append(f"{ranks_phrase(elsewhere)} issued another collective at #{seq}")
    if short:
        who.append(f"{ranks_phrase(short)} behind")
    return f"{', '.join(who)}; {waiter or 'the others'} {waited}"
