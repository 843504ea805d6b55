"""The report view's parts: what every renderer formats, worked out once by `view.build`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from . import common as c
from .wording import INPUT_STATUS_WORDS, TITLES

Segments = tuple[tuple[bool, str], ...]


# --------------------------------------------------------------------------- the parts


@dataclass(frozen=True)
class OutcomeLine:
    """What became of the job: the first thing every report says."""

    id: str  # succeeded | stopped | failed | hung | incomplete | unknown
    word: str  # "Finished", "Stopped on purpose", ...
    why: str
    evidence: tuple[tuple[str, str], ...]  # (where, line)
    fault_too: bool  # ended well, but a fault is in the logs too

    @property
    def line(self) -> str:
        return f"{self.word}: {c.lower_first(self.why)}" if self.why else self.word


@dataclass(frozen=True)
class Label:
    id: str
    name: str
    pct: str  # "91%"
    share: float  # in [0, 1], for a bar
    # shown at the same score as the label listed above it: the order between the two is
    # a tie-break, and the report says so rather than rank them by a number they share
    tied: bool = False


@dataclass(frozen=True)
class Action:
    text: str  # as written (backticks mark what to type): what a copy button copies
    segments: Segments  # (is_code, text) pieces


@dataclass(frozen=True)
class Fix:
    id: str
    name: str
    pct: str
    share: float
    actions: tuple[Action, ...]
    why: str
    tied: bool = False  # shown at the same score as the fix listed above it


@dataclass(frozen=True)
class FirstFailure:
    rank: str
    host: str
    time: str  # ISO time, "" when unknown
    where: str  # file:line under the common folder
    text: str  # the whole message (cleaned); renderers cut it to their length
    note: str  # why a line of another rank's input names this rank, "" when it is its own
    # what the block is called: the rank's own error, or the record that singles it out
    title: str = TITLES.first_failure
    # the ranks a line by no rank is about ("2-3": a launcher's line about ranks that never
    # started), where it names several: it shows them all, not which of them went first
    about: str = ""

    @property
    def label(self) -> str:
        """`rank 3`; `ranks 2-3` for a line by no rank about both; an error no rank printed
        (the launcher's, a store's) that names none, none."""
        if self.about:
            return f"ranks {self.about}"
        return f"rank {self.rank}" if self.rank not in ("", "-") else "no rank named"


@dataclass(frozen=True)
class Hang:
    detected: bool
    headline: str  # "rank 3 behind, in all_reduce seq 57 on process group 0" or "no hang"
    collective: str  # "all_reduce, seq 57, sizes [[1048576]], ..."
    explanation: str


@dataclass(frozen=True)
class Who:
    first: FirstFailure | None
    culprits: str  # "3", "0-2, 7"; "" when none was named
    hang: Hang | None

    def culprit_line(self) -> str:
        """Who started it, in one line: `rank 3 on node-b (logs/3.log:880)`, or with several
        culprits `ranks 2-3 (first: rank 2 on node-b, logs/2.log:7)`."""
        several = any(ch in self.culprits for ch in ",-")
        if self.first is not None and self.first.rank != "-":
            f = self.first
            host = f" on {f.host}" if f.host else ""
            if several and (f.about or f.note):
                # the line is not that rank's own (a launcher's line about ranks that never
                # started): it shows where it was seen, not which of them went first
                return f"ranks {self.culprits} ({f.where})"
            if several:
                return f"ranks {self.culprits} (first: rank {f.rank}{host}, {f.where})"
            return f"rank {f.rank}{host} ({f.where})"
        if self.culprits:
            return f"{'ranks' if several else 'rank'} {self.culprits}"
        return ""


@dataclass(frozen=True)
class EvidenceGroup:
    """One message, and every rank that printed it."""

    ranks: tuple[int, ...]
    who: str  # "rank 3", "ranks 0-126", "no rank"
    where: str  # the first line's file:line
    count: int  # evidence lines folded into this one
    why: str
    text: str  # the first line's text
    varies: bool  # the folded lines differ in their numbers or names


@dataclass(frozen=True)
class TimelineRow:
    clock: str
    iso: str
    offset: str
    rank: str
    role: str  # initiating | cascade | context
    text: str
    where: str


@dataclass(frozen=True)
class Timeline:
    rows: tuple[TimelineRow, ...]  # every entry, in time order
    priority: tuple[int, ...]  # row indices, most worth showing first

    def capped(self, cap: int) -> tuple[tuple[TimelineRow, ...], str]:
        """At most `cap` rows in time order, initiating ones first to survive, and a note on
        what the cap hid. A big job has one initiating error and thousands of cascade lines:
        a head-cut would show only the part a reader should skip."""
        if len(self.rows) <= cap:
            return self.rows, ""
        keep = sorted(self.priority[:cap])
        kept = set(keep)
        hidden = Counter(r.role for i, r in enumerate(self.rows) if i not in kept)
        roles = ", ".join(
            f"{hidden[role]} {role}"
            for role in ("initiating", "context", "cascade")
            if hidden[role]
        )
        note = (
            f"{len(self.rows) - cap} more entries not shown ({roles}); "
            "the JSON report has all of them."
        )
        return tuple(self.rows[i] for i in keep), note


@dataclass(frozen=True)
class Mark:
    x: float  # 0..1 along the time axis
    kind: str  # initiating | cascade | context | exit | stopped
    title: str  # what a pointer over it says
    count: int = 1  # events folded into this mark (the shared lane)


@dataclass(frozen=True)
class Lane:
    label: str  # "rank 3" or "1,023 other ranks"
    culprit: bool
    marks: tuple[Mark, ...]
    shared: bool = False
    note: str = ""  # said on an empty lane: why the culprit has nothing drawn


@dataclass(frozen=True)
class Lanes:
    lanes: tuple[Lane, ...]
    start: str  # ISO time of the left edge
    span: float  # seconds from the left to the right edge
    ticks: tuple[tuple[float, str], ...]  # (x, "+2.5s")
    earlier: int  # events before the window, drawn on its left edge
    restarts: str  # "the job ran 3 attempts (elastic restarts)", "" when none


@dataclass(frozen=True)
class ProgressRow:
    ranks: str
    count: int
    enqueued: str
    started: str
    completed: str
    outlier: bool
    note: str  # "behind", "no dump", ""


@dataclass(frozen=True)
class ProgressTable:
    """One process group: the last collective each rank entered, started and completed."""

    group: str  # "0 (default_pg)"
    stuck: str  # "the others wait in all_reduce #57", "" when none
    rows: tuple[ProgressRow, ...]
    states_known: bool  # started/completed columns mean something (NCCL dumps)


@dataclass(frozen=True)
class Stacks:
    """Ranks whose main thread stood at the same place (py-spy)."""

    ranks: str
    count: int
    top: str
    frames: tuple[str, ...]  # "function (file:line)", innermost first
    waiting: bool
    outlier: bool  # py-spy alone sets it apart from the others
    culprit: bool = False  # holds a rank the analysis blames (a 1-1 split has no outlier)
    setup: str = ""  # the process-group setup or rendezvous call it waits in

    @property
    def waits(self) -> str:
        """Where the group waits, as every format says it: in setup is not in a collective."""
        if self.setup:
            what = "the rendezvous" if "rendezvous" in self.setup else "process-group setup"
            return f"waiting in {what} ({self.setup})"
        return "waiting in a collective" if self.waiting else ""


@dataclass(frozen=True)
class InputGroup:
    kind: str
    status: str  # read | empty | set aside | problem
    count: int
    ranks: str  # "0-1023" or ""
    hosts: int
    example: str  # one path, under the common folder

    @property
    def status_said(self) -> str:
        """The status as every format writes it."""
        return INPUT_STATUS_WORDS.get(self.status, "read")


@dataclass(frozen=True)
class InputProblem:
    path: str
    kind: str
    rank: str
    host: str
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class Inputs:
    overview: str  # "1024 inputs under job/: 1020 rank_log, 4 pyspy; 1 could not be read"
    groups: tuple[InputGroup, ...]
    problems: tuple[InputProblem, ...]  # every input that could not be read completely


@dataclass(frozen=True)
class Similar:
    id: str
    url: str | None  # only plain web links
    pct: str


@dataclass(frozen=True)
class FindingRow:
    kind: str
    ranks: str
    summary: str


@dataclass(frozen=True)
class ReportView:
    verdict: str
    summary: str
    abstain: bool
    outcome: OutcomeLine | None
    ended_well: bool  # the job ended well and nothing in its logs says a fault happened
    symptoms: tuple[Label, ...]
    root_causes: tuple[Label, ...]
    stage: str  # "ST4 Training execution", "" when none
    collect_next: tuple[Action, ...]
    who: Who | None
    fixes: tuple[Fix, ...]  # the fixes worth trying, best first
    fixes_hidden: int  # long shots left out (in the JSON)
    evidence: tuple[EvidenceGroup, ...]
    similar: tuple[Similar, ...]
    findings: tuple[FindingRow, ...]
    timeline: Timeline
    lanes: Lanes | None
    progress: tuple[ProgressTable, ...]
    stacks: tuple[Stacks, ...]
    inputs: Inputs

    @property
    def unreadable(self) -> int:
        """Inputs that could not be read completely: what they held is missing."""
        return len(self.inputs.problems)

    def brief(self) -> tuple[tuple[str, str], ...]:
        """The short form (`--brief`): verdict, culprit, top fix, one line of evidence."""
        # the first line leads with what became of the job, then what failed, if anything
        head = self.verdict_with_score()
        if self.outcome is not None:
            if self.symptoms or self.root_causes or self.abstain:
                head = f"{self.outcome.word}: {head}"
            else:
                head = self.outcome.line
        out = [("triage", head)]
        who = self.who.culprit_line() if self.who is not None else ""
        if self.who is not None and self.who.hang is not None and self.who.hang.detected:
            who = f"{who}; {self.who.hang.headline}" if who else self.who.hang.headline
        if who:
            out.append(("culprit", who))
        if self.fixes and self.fixes[0].actions:
            fix = self.fixes[0]
            out.append(("fix", f"{fix.actions[0].text} ({fix.id} {fix.name}, {fix.pct})"))
        elif self.collect_next:
            out.append(("collect", self.collect_next[0].text))
        if self.evidence:
            e = self.evidence[0]
            line = c.one_line(e.text, 160)
            out.append(("evidence", f"{e.where}: {line}" if e.where else line))
        return tuple(out)

    def verdict_with_score(self) -> str:
        if self.abstain or not (self.root_causes or self.symptoms):
            return self.verdict
        best = self.root_causes[0] if self.root_causes else self.symptoms[0]
        return f"{self.verdict} ({best.pct})"
