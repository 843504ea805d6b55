"""The report view: everything a report shows, worked out once from a Diagnosis.

    view = build(diagnosis)     # verdict, who, fixes worth showing, grouped evidence, ...
    text / markdown / html      # only format the view; none of them decides what to show

What to show is decided here and only here: which fixes are worth trying, how evidence of many
ranks collapses into one line per message ("ranks 0-126: ..."), which ranks get a lane of their
own in the timeline picture, what the flight-recorder table and the py-spy groups mark as the
odd one out, how 1,024 inputs fold into a few lines by kind and status, and what a contradiction
would be ("Hang: not detected · lagging ranks 1" is said as "no hang: ..."). Strings here are
cleaned of escape codes (`common.clean`) but not escaped: each renderer escapes for its format.
"""

from __future__ import annotations

import math
import os
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from triage.model import (
    SURE_CAUSE,
    Diagnosis,
    Evidence,
    GroupProgress,
    InputSummary,
    OutcomeKind,
    ScoredLabel,
    SourceKind,
    StackGroup,
    TimelineEntry,
)

from . import common as c

if TYPE_CHECKING:
    from triage.knowledge import Knowledge

ABSTAIN_TITLE = "Not enough evidence for a diagnosis"
NO_EVIDENCE_TITLE = "No evidence found"

# Fixes worth trying: the best one always; the others only while they are not far behind it.
# Below these a pattern is a long shot (the JSON keeps every pattern for programs).
FIX_MIN_SCORE = 0.15
FIX_MIN_SHARE = 0.3
FIX_MAX = 4

# A zero-byte input (a killed rank's stderr.log) or an empty folder is a fact about the job,
# not a read failure; ingest notes them with these warnings.
EMPTY_NOTES = frozenset({"empty file", "empty directory: nothing to read"})

LANE_RANKS = 16  # ranks drawn on a lane of their own; the others share one lane
LANE_MARKS = 240  # marks per lane: more would only overdraw each other
AGGREGATE_BUCKETS = 200  # the shared lane draws one mark per bucket of time and role


Segments = tuple[tuple[bool, str], ...]


# What each outcome is called in a report's first line, and the style it is shown in.
OUTCOME_WORDS = {
    OutcomeKind.SUCCEEDED: "Finished",
    OutcomeKind.STOPPED: "Stopped on purpose",
    OutcomeKind.FAILED: "Failed",
    OutcomeKind.HUNG: "Hung",
    OutcomeKind.INCOMPLETE: "Still running when the logs end",
    OutcomeKind.UNKNOWN: "End not known",
}


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


@dataclass(frozen=True)
class FirstFailure:
    rank: str
    host: str
    time: str  # ISO time, "" when unknown
    where: str  # file:line under the common folder
    text: str  # the whole message (cleaned); renderers cut it to their length
    note: str  # why a line of another rank's input names this rank, "" when it is its own


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


@dataclass(frozen=True)
class InputGroup:
    kind: str
    status: str  # read | empty | problem
    count: int
    ranks: str  # "0-1023" or ""
    hosts: int
    example: str  # one path, under the common folder


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


# --------------------------------------------------------------------------- building


def build(d: Diagnosis, kb: Knowledge | None = None) -> ReportView:
    """The view of one diagnosis. Never raises on odd content (hostile text, NaN scores).
    `kb`: the knowledge the diagnosis was made with (None: the shipped one), for the masks
    that fold evidence and the collect-next advice of a diagnosis that carries none."""
    base = base_dir(d.inputs)
    # a job that ended well with nothing wrong in its logs is an answer, not an abstention
    ended_well = d.outcome is not None and d.outcome.clean
    abstain = not d.symptoms and not d.root_causes and not ended_well
    fixes = _fixes(d) if not abstain else ()
    return ReportView(
        verdict=verdict(d),
        summary=c.short(d.summary),
        abstain=abstain,
        outcome=_outcome(d, base),
        ended_well=ended_well,
        symptoms=tuple(_label(x) for x in d.symptoms[:3]),
        root_causes=tuple(_label(x) for x in d.root_causes[:3]),
        stage=(c.short(f"{d.stage.id} {d.stage.name or d.stage.slug}", 200) if d.stage else ""),
        collect_next=tuple(_action(a) for a in collect_next(d, kb)) if abstain else (),
        who=_who(d, base),
        fixes=fixes,
        fixes_hidden=max(0, len(d.fix_patterns) - len(fixes)) if not abstain else 0,
        evidence=_evidence(d.evidence, base, kb),
        similar=tuple(
            Similar(c.short(s.id, 200), c.safe_url(s.url), c.pct(s.score)) for s in d.similar_cases
        ),
        findings=tuple(
            FindingRow(c.short(f.kind, 80), c.ranks_str(f.ranks), c.short(f.summary))
            for f in d.findings
        ),
        timeline=_timeline(d.timeline, base),
        lanes=_lanes(d),
        progress=tuple(
            _progress(g, hung=d.hang is not None and d.hang.detected) for g in d.process_groups
        ),
        stacks=tuple(_stacks(g, _blamed(d)) for g in d.stack_groups),
        inputs=_inputs(d.inputs, base),
    )


def verdict(d: Diagnosis) -> str:
    """The headline: top symptom, and top root cause when there is one; for a job that ended
    well with nothing wrong in its logs, how it ended."""
    if not d.evidence_found:
        return NO_EVIDENCE_TITLE
    if d.outcome is not None and d.outcome.clean:
        return f"{OUTCOME_WORDS[d.outcome.id]}: no failure in the logs"
    if not d.symptoms and not d.root_causes:
        return ABSTAIN_TITLE
    parts = []
    if d.symptoms:
        parts.append(c.short(d.symptoms[0].name, 200))
    if d.root_causes and d.root_causes[0].score >= SURE_CAUSE and not d.cause_open:
        cause = c.short(d.root_causes[0].name, 200)
        parts.append(f"caused by {cause[:1].lower()}{cause[1:]}")
    elif d.root_causes:
        parts.append("cause unsettled")
    return ", ".join(parts)


def _outcome(d: Diagnosis, base: str) -> OutcomeLine | None:
    out = d.outcome
    if out is None or out.id is OutcomeKind.UNKNOWN:
        return None  # a paste or an excerpt: the verdict says all there is (the JSON keeps it)
    return OutcomeLine(
        id=out.id.value,
        word=OUTCOME_WORDS[out.id],
        why=c.short(out.why, 400),
        evidence=tuple(
            dict.fromkeys(  # the same line on several ranks' logs is shown once
                (_where(e.source, e.line, base), c.one_line(e.text, 240)) for e in out.evidence
            )
        ),
        fault_too=out.fault_too,
    )


def collect_next(d: Diagnosis, kb: Knowledge | None = None) -> list[str]:
    """What evidence to gather next (`rules/collect_next.yaml`), step by step.

    The pipeline's diagnosis carries the steps classify chose from the evidence it read; a
    diagnosis without them gets the advice for its inputs (their kinds and ranks).
    """
    if d.collect_next:
        return list(d.collect_next)
    from triage import knowledge

    ranks = {i.rank for i in d.inputs if i.rank is not None}
    situation = knowledge.Situation(
        kinds=frozenset(i.kind.value for i in d.inputs),
        inputs=len(d.inputs),
        ranks=len(ranks),
        hang=d.hang is not None and d.hang.detected,
    )
    return (kb if kb is not None else knowledge.shipped()).collect_next.steps(situation)


def base_dir(inputs: Sequence[InputSummary]) -> str:
    """The folder every input lives under (`job42/logs/`), shown once instead of on every row."""
    paths = [i.path for i in inputs]
    if len(paths) < 2:
        return ""
    prefix = os.path.commonprefix(paths)
    return prefix[: prefix.rfind("/") + 1]


def _where(source: str, line: int | None, base: str) -> str:
    """`logs/3.log:880` under the common folder; a paste is no file: `pasted text, line 3`."""
    if source.startswith("<pasted"):
        return f"pasted text, line {line}" if line is not None else "pasted text"
    return c.short(c.where(source, line, base), 400)


def _path(path: str, base: str) -> str:
    return (
        _where(path, None, base) if path.startswith("<pasted") else c.short(c.rel(path, base), 400)
    )


def _label(x: ScoredLabel) -> Label:
    return Label(c.short(x.id, 40), c.short(x.name, 200), c.pct(x.score), c.share(x.score))


def _action(text: str) -> Action:
    return Action(c.short(text, 2000), tuple(c.segments(text)))


def _fixes(d: Diagnosis) -> tuple[Fix, ...]:
    shown = []
    top = d.fix_patterns[0].score if d.fix_patterns else 0.0
    for n, f in enumerate(d.fix_patterns):
        worth = f.score >= FIX_MIN_SCORE and f.score >= FIX_MIN_SHARE * top
        if n and (not worth or len(shown) >= FIX_MAX):
            continue
        shown.append(
            Fix(
                c.short(f.id, 40),
                c.short(f.name, 200),
                c.pct(f.score),
                c.share(f.score),
                tuple(_action(a) for a in f.actions),
                c.short(f.why),
            )
        )
    return tuple(shown)


# --------------------------------------------------------------------------- who


_KIND_NOUN = {
    SourceKind.FLIGHT_RECORDER: "flight-recorder dump",
    SourceKind.PYSPY: "py-spy dump",
    SourceKind.ELASTIC_ERROR: "error file",
    SourceKind.ENV_REPORT: "environment report",
}


def _who(d: Diagnosis, base: str) -> Who | None:
    if d.first_failure is None and not d.culprit_ranks and d.hang is None:
        return None
    first = None
    if d.first_failure is not None:
        f = d.first_failure
        first = FirstFailure(
            rank=c.rank_str(f.rank),
            host=c.short(f.host or "", 200),
            time=c.iso_time(f.time) if f.time is not None else "",
            where=_where(f.source, f.line, base),
            text=c.short(f.text, 20_000),
            note=_first_failure_note(d),
        )
    return Who(first, c.ranks_str(d.culprit_ranks) if d.culprit_ranks else "", _hang(d))


def _first_failure_note(d: Diagnosis) -> str:
    """Why rank 2's first failure is quoted from rank 0's input, when it is."""
    f = d.first_failure
    if f is None or f.rank is None:
        return ""
    source = next((i for i in d.inputs if i.path == f.source), None)
    if source is not None and source.rank is None:
        # a shared log (a launcher's console): its line is the rank's own only when some line
        # of the rank's is read from it; else the line is about the job, not by the rank
        said = [(e.source, e.rank) for e in d.evidence]
        said += [(t.source, t.rank) for t in d.timeline if t.role != "context"]
        if (f.source, f.rank) not in said:
            return (
                f"a line of the job's log, by no rank: rank {f.rank} printed nothing of its "
                "own; this line shows it missing"
            )
    if source is None or source.rank is None or source.rank == f.rank:
        return ""
    noun = _KIND_NOUN.get(source.kind, "log")
    if source.kind is SourceKind.FLIGHT_RECORDER:
        return (
            f"quoted from rank {source.rank}'s {noun}: compared with the other ranks' dumps, "
            f"it shows rank {f.rank} out of step"
        )
    return f"quoted from rank {source.rank}'s {noun}, which reports it about rank {f.rank}"


def _hang(d: Diagnosis) -> Hang | None:
    h = d.hang
    if h is None:
        return None
    collective = c.hang_collective(d)
    explanation = c.short(h.explanation, 2000)
    if not h.detected:
        # "not detected · lagging ranks 1" reads as a contradiction: say what did happen
        said = explanation[len("no hang: ") :] if explanation.startswith("no hang: ") else ""
        return Hang(False, f"no hang: {said}" if said else "no hang", "", "")
    where = ""
    if h.collective:
        op = h.collective.op or h.collective.profiling_name
        seq = h.collective.seq
        if op:
            where = f" in {c.short(str(op), 80)}" + (f" #{seq}" if seq is not None else "")
    pg = f" on process group {c.short(h.process_group, 120)}" if h.process_group else ""
    if h.lagging_ranks:
        one = len(h.lagging_ranks) == 1
        noun = "rank" if one else "ranks"
        waited = f"waited{where}{pg}" if where or pg else f"waited for {'it' if one else 'them'}"
        head = f"{noun} {c.ranks_str(h.lagging_ranks)} behind; the others {waited}"
    else:
        head = f"the ranks waited{where}{pg}"
    return Hang(True, head, collective, explanation)


# --------------------------------------------------------------------------- evidence


def _evidence(
    evidence: Sequence[Evidence], base: str, kb: Knowledge | None
) -> tuple[EvidenceGroup, ...]:
    """Evidence lines folded across ranks: the same message (its numbers, names and paths
    masked as the failure signature masks them) and the same reason make one group."""
    from triage.classify.signature import mask, strip_prefixes

    groups: dict[tuple[str, str], list[Evidence]] = {}
    for e in evidence:
        text = c.clean(e.text).strip()
        first = text.split("\n", 1)[0]
        key = (e.why, mask(strip_prefixes(first, kb), kb) if first else "")
        groups.setdefault(key, []).append(e)
    out: dict[tuple[str, str], EvidenceGroup] = {}
    lines_of: dict[tuple[str, str], set[tuple[str, int | None]]] = {}
    for members in groups.values():
        e = members[0]
        # records of a dump have no line: two of one file are not the same line
        lines = {(m.source, m.line) for m in members if m.line is not None}
        ranks = tuple(sorted({m.rank for m in members if m.rank is not None}))
        texts = {c.clean(strip_prefixes(m.text, kb)).strip() for m in members}
        group = EvidenceGroup(
            ranks=ranks,
            who=_ranks_phrase(ranks),
            where=_where(e.source, e.line, base),
            count=len(members),
            why=c.short(e.why, 200),
            text=c.short(e.text, 20_000),
            varies=len(texts) > 1,
        )
        # one line that several rules quote is shown once, with every reason
        key = (group.where, group.text.split("\n", 1)[0])
        key = next((k for k, seen in lines_of.items() if lines and lines <= seen), key)
        seen = out.get(key)
        if seen is None:
            out[key] = group
            lines_of[key] = lines
        elif group.why not in seen.why.split(", "):
            out[key] = replace(seen, why=c.short(f"{seen.why}, {group.why}", 200))
    return tuple(out.values())


def _ranks_phrase(ranks: Sequence[int]) -> str:
    if not ranks:
        return "no rank"
    noun = "rank" if len(ranks) == 1 else "ranks"
    return f"{noun} {c.ranks_str(ranks)}"


# --------------------------------------------------------------------------- timeline

_ROLES = ("initiating", "cascade", "context")
_ROLE_PRIORITY = {"initiating": 0, "context": 1, "cascade": 2}


def _timeline(entries: Sequence[TimelineEntry], base: str) -> Timeline:
    span = c.time_span(entries)
    start = span[0] if span else None
    rows = tuple(
        TimelineRow(
            clock=c.clock_time(e.time),
            iso=c.iso_time(e.time),
            offset=c.offset(e.time, start),
            rank=c.rank_str(e.rank),
            role=e.role if e.role in _ROLES else "context",
            text=c.short(e.text, 20_000),
            where=_where(e.source, e.line, base),
        )
        for e in entries
    )
    priority = tuple(
        sorted(range(len(rows)), key=lambda i: (_ROLE_PRIORITY.get(rows[i].role, 1), i))
    )
    return Timeline(rows, priority)


def _lanes(d: Diagnosis) -> Lanes | None:
    """Per-rank swimlanes: each rank's events and exit on one time axis.

    The window opens at the first initiating or cascade event: a start-up line hours earlier
    would otherwise squeeze the whole failure into the right edge; earlier events sit on the
    left edge. The culprit, lagging and initiating ranks get lanes first; past LANE_RANKS the
    other ranks share one lane, drawn as one mark per stretch of time and role.
    """
    # only what is drawn sets the axis: a job-wide note hours later must not squeeze the lanes
    timed = [e for e in d.timeline if e.time is not None and e.rank is not None]
    exits = [x for x in d.rank_exits if x.time is not None and x.rank is not None]
    times = [e.time for e in timed if e.time is not None] + [
        x.time for x in exits if x.time is not None
    ]
    if len(times) < 2 or max(times) <= min(times):
        return None
    start, end = min(times), max(times)
    failing = [e.time for e in timed if e.role != "context" and e.time is not None]
    if failing and min(failing) < end:
        start = min(failing)
    earlier = sum(1 for t in times if t < start)
    by_rank: dict[int, list[Mark]] = defaultdict(list)

    def x_of(t: float) -> float:
        return max(0.0, min(1.0, (t - start) / (end - start)))

    for e in timed:
        if e.rank is None or e.time is None:
            continue
        role = e.role if e.role in _ROLES else "context"
        title = f"{c.clock_time(e.time)} rank {e.rank} {role}: {c.one_line(e.text, 160)}"
        by_rank[e.rank].append(Mark(x_of(e.time), role, title))
    for x in exits:
        if x.rank is None or x.time is None:
            continue
        kind = "stopped" if x.exitcode in (-15, -2, 143) else "exit"
        how = f"exit {x.exitcode}" + (f" ({x.signal})" if x.signal else "")
        title = f"{c.clock_time(x.time)} rank {x.rank} {how}"
        by_rank[x.rank].append(Mark(x_of(x.time), kind, title))
    if not by_rank:
        return None
    culprits = set(d.culprit_ranks)
    if d.hang is not None and d.hang.detected:
        culprits |= set(d.hang.lagging_ranks)

    def priority(rank: int) -> tuple[int, int]:
        marks = by_rank[rank]
        if rank in culprits:
            return (0, rank)
        if any(m.kind == "initiating" for m in marks):
            return (1, rank)
        if any(m.kind == "exit" for m in marks):
            return (2, rank)
        return (3, rank)

    ordered = sorted(by_rank, key=priority)
    own = ordered if len(ordered) <= LANE_RANKS + 1 else ordered[:LANE_RANKS]
    own = sorted(own, key=lambda r: (r not in culprits, r))
    lanes = [Lane(f"rank {r}", r in culprits, _thin(by_rank[r])) for r in own]
    # a culprit whose own error carries no timestamp still gets its lane, saying so
    untimed = {e.rank for e in d.timeline if e.time is None and e.role == "initiating"}
    for r in sorted(set(d.culprit_ranks) - set(by_rank), reverse=True):
        note = "its error has no timestamp" if r in untimed else "nothing of it is timed"
        lanes.insert(0, Lane(f"rank {r}", True, (), note=note))
    rest = [r for r in ordered if r not in set(own)]
    if rest:
        lanes.append(_shared_lane(rest, by_rank))
    restarts = next((c.short(f.summary, 200) for f in d.findings if f.kind == "restart"), "")
    return Lanes(
        lanes=tuple(lanes),
        start=c.iso_time(start),
        span=end - start,
        ticks=_ticks(end - start),
        earlier=earlier,
        restarts=restarts,
    )


_DRAW_ORDER = {"cascade": 0, "context": 1, "stopped": 2, "exit": 3, "initiating": 4}


def _thin(marks: list[Mark]) -> tuple[Mark, ...]:
    """One mark per spot and kind, the loud ones drawn last (on top)."""
    seen: dict[tuple[int, str], Mark] = {}
    for m in marks:
        seen.setdefault((int(m.x * 400), m.kind), m)
    kept = sorted(seen.values(), key=lambda m: (_DRAW_ORDER.get(m.kind, 1), m.x))
    return tuple(kept[-LANE_MARKS:])


def _shared_lane(ranks: list[int], by_rank: dict[int, list[Mark]]) -> Lane:
    buckets: dict[tuple[int, str], list[tuple[int, Mark]]] = defaultdict(list)
    for r in ranks:
        for m in by_rank[r]:
            buckets[(int(m.x * AGGREGATE_BUCKETS), m.kind)].append((r, m))
    marks = []
    for (_, kind), members in buckets.items():
        who = sorted({r for r, _ in members})
        first = members[0][1]
        what = first.title.split(": ", 1)[-1] if ": " in first.title else first.title
        title = f"{len(members)} × {kind} on {_ranks_phrase(who)}: {what}"
        marks.append(Mark(sum(m.x for _, m in members) / len(members), kind, title, len(members)))
    marks.sort(key=lambda m: (_DRAW_ORDER.get(m.kind, 1), m.x))
    label = f"{len(ranks):,} other ranks"
    return Lane(label, False, tuple(marks[-LANE_MARKS:]), shared=True)


def _ticks(span: float) -> tuple[tuple[float, str], ...]:
    """Four to ten round steps along the axis, in seconds, minutes or hours (1, 2 or 5 times a
    power of ten of the unit): `+0s`, `+2s`, ... or `+0min`, `+10min`, ..."""
    if not span > 0 or span == float("inf"):
        return ((0.0, "+0s"),)
    raw = span / 5
    unit, name = (1.0, "s") if raw < 60 else (60.0, "min") if raw < 3600 else (3600.0, "h")
    power = 10 ** math.floor(math.log10(raw / unit))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw / unit) * unit
    count = int(span / step + 1e-9)
    return tuple((n * step / span, f"+{n * step / unit:g}{name}") for n in range(count + 1))


# --------------------------------------------------------------------------- flight recorder


def _progress(g: GroupProgress, hung: bool = True) -> ProgressTable:
    """Ranks folded by where they stood; the rows that are not the majority's are marked."""
    states_known = any(p.started is not None or p.completed is not None for p in g.ranks)
    rows: dict[tuple[int | None, int | None, int | None], list[int]] = defaultdict(list)
    for p in g.ranks:
        rows[(p.enqueued, p.started, p.completed)].append(p.rank)
    majority = max(rows, key=lambda k: (len(rows[k]), k[0] or -1), default=None)
    lagging = set(g.lagging)
    out = []
    for key, ranks in sorted(rows.items(), key=lambda kv: (-(kv[0][0] or -1), kv[1][0])):
        behind = bool(lagging & set(ranks))
        outlier = key != majority or behind
        out.append(
            ProgressRow(
                ranks=c.ranks_str(ranks),
                count=len(ranks),
                enqueued=_seq(key[0]),
                started=_seq(key[1]) if states_known else "",
                completed=_seq(key[2]) if states_known else "",
                outlier=outlier,
                note="behind" if behind else ("odd one out" if outlier else ""),
            )
        )
    if g.missing:
        out.append(
            ProgressRow(c.ranks_str(g.missing), len(g.missing), "-", "", "", True, "no dump")
        )
    stuck = ""
    if g.stuck_seq is not None:
        op = f"{c.short(g.stuck_op, 60)} " if g.stuck_op else ""
        # "stuck" beside "no hang" would contradict it: the others got an error there
        stuck = f"{'stuck' if hung else 'went wrong'} at {op}#{g.stuck_seq}"
    group = c.short(g.pg if not g.desc else f"{g.pg} ({g.desc})", 120)
    return ProgressTable(group, stuck, tuple(out), states_known)


def _seq(value: int | None) -> str:
    return "-" if value is None else f"#{value}"


# --------------------------------------------------------------------------- py-spy


def _blamed(d: Diagnosis) -> set[int]:
    blamed = set(d.culprit_ranks)
    if d.hang is not None and d.hang.detected:
        blamed |= set(d.hang.lagging_ranks)
    return blamed


def _stacks(g: StackGroup, blamed: set[int]) -> Stacks:
    frames = tuple(
        c.short(f"{f.function} ({f.filename}" + (f":{f.line})" if f.line else ")"), 200)
        for f in g.frames
    )
    top = c.short(g.frames[0].function, 120) if g.frames else "?"
    culprit = bool(blamed & set(g.ranks))
    return Stacks(c.ranks_str(g.ranks), len(g.ranks), top, frames, g.waiting, g.outlier, culprit)


# --------------------------------------------------------------------------- inputs


def _status(i: InputSummary) -> str:
    problems = [w for w in i.warnings if w not in EMPTY_NOTES]
    if problems:
        return "problem"
    return "empty" if i.warnings else "read"


def _inputs(inputs: Sequence[InputSummary], base: str) -> Inputs:
    """Inputs folded by kind and status; the ones that could not be read, one by one."""
    groups: dict[tuple[str, str], list[InputSummary]] = defaultdict(list)
    problems = []
    for i in inputs:
        status = _status(i)
        groups[(i.kind.value, status)].append(i)
        if status == "problem":
            problems.append(
                InputProblem(
                    path=_path(i.path, base),
                    kind=i.kind.value,
                    rank=c.rank_str(i.rank),
                    host=c.short(i.host or "-", 200),
                    warnings=tuple(c.short(w, 400) for w in i.warnings if w not in EMPTY_NOTES),
                )
            )
    order = {"problem": 0, "read": 1, "empty": 2}
    folded = tuple(
        InputGroup(
            kind=kind,
            status=status,
            count=len(members),
            ranks=c.ranks_str([m.rank for m in members if m.rank is not None])
            if any(m.rank is not None for m in members)
            else "",
            hosts=len({m.host for m in members if m.host}),
            example=_path(members[0].path, base),
        )
        for (kind, status), members in sorted(
            groups.items(), key=lambda kv: (order[kv[0][1]], -len(kv[1]), kv[0][0])
        )
    )
    return Inputs(_overview(inputs, base, len(problems)), folded, tuple(problems))


def _overview(inputs: Sequence[InputSummary], base: str, problems: int) -> str:
    """`1024 inputs under job/: 1020 rank_log, 4 pyspy; 2 could not be read completely`."""
    if not inputs:
        return "no inputs"
    kinds = Counter(i.kind.value for i in inputs)
    parts = ", ".join(f"{n} {k}" for k, n in kinds.most_common())
    noun = "input" if len(inputs) == 1 else "inputs"
    under = f" under {base}" if base else ""
    empty = sum(1 for i in inputs if _status(i) == "empty")
    tail = f"; {problems} could not be read completely" if problems else ""
    tail += f"; {empty} empty" if empty else ""
    return f"{len(inputs)} {noun}{under}: {parts}{tail}"


def generated() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
