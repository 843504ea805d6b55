"""The report view: everything a report shows, worked out once from a Diagnosis.

    view = build(diagnosis)     # verdict, who, fixes worth showing, grouped evidence, ...
    text / markdown / html      # only format the view; none of them decides what to show

What to show is decided here and only here: which fixes are worth trying, how evidence of many
ranks collapses into one line per message ("ranks 0-126: ..."), which ranks get a lane of their
own in the timeline picture, what the flight-recorder table and the py-spy groups mark as the
odd one out, how 1,024 inputs fold into a few lines by kind and status, and what a contradiction
would be ("Hang: not detected · lagging ranks 1" is said as "no hang: ..."). Strings here are
cleaned of escape codes (`common.clean`) but not escaped: each renderer escapes for its format.
The view's parts are `view_model.py`, its pictures (lanes, progress, stacks) `pictures.py`, and
what it calls things `wording.py`.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, TypeVar

from triage.analysis.timeline import first_error
from triage.model import (
    LABELS_SHOWN,
    Diagnosis,
    Evidence,
    InputNote,
    InputSummary,
    OutcomeKind,
    ScoredLabel,
    SourceKind,
)
from triage.recommend import names_a_machine

from . import common as c
from . import pictures, wording
from .view_model import (
    Action,
    EvidenceGroup,
    FindingRow,
    FirstFailure,
    Fix,
    Hang,
    InputGroup,
    InputProblem,
    Inputs,
    Label,
    OutcomeLine,
    ReportView,
    Similar,
    Timeline,
    TimelineRow,
    Who,
)
from .wording import ABSTAIN_TITLE, NO_EVIDENCE_TITLE, OUTCOME_WORDS, TITLES, ranks_phrase

_Scored = TypeVar("_Scored", Label, Fix)  # what a report lists with a percentage

if TYPE_CHECKING:
    from triage.knowledge import Knowledge


# Fixes worth trying: the best one always; the others only while they are not far behind it.
# Below these a pattern is a long shot (the JSON keeps every pattern for programs).
FIX_MIN_SCORE = 0.15
FIX_MIN_SHARE = 0.3
FIX_MAX = 4

# A zero-byte input (a killed rank's stderr.log) or an empty folder is a fact about the job,
# not a read failure; so is a note left beside the logs, listed and set aside.
NOT_FAILURES = frozenset(InputNote)


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
        symptoms=_ties(tuple(_label(x) for x in d.symptoms[:LABELS_SHOWN])),
        root_causes=_ties(tuple(_label(x) for x in d.root_causes[:LABELS_SHOWN])),
        stage=(c.short(f"{d.stage.id} {d.stage.name or d.stage.slug}", 200) if d.stage else ""),
        collect_next=tuple(_action(a) for a in collect_next(d, kb)) if abstain else (),
        who=_who(d, base),
        fixes=fixes,
        fixes_hidden=max(0, len(d.fix_patterns) - len(fixes)) if not abstain else 0,
        evidence=_evidence(d.evidence, base, kb, _records(d)),
        similar=tuple(
            Similar(c.short(s.id, 200), c.safe_url(s.url), c.pct(s.score)) for s in d.similar_cases
        ),
        findings=tuple(
            FindingRow(c.short(str(f.kind), 80), c.ranks_str(f.ranks), c.short(f.summary))
            for f in d.findings
        ),
        timeline=_timeline(d, base),
        lanes=pictures.lanes(d),
        progress=tuple(
            pictures.progress(g, hung=d.hang is not None and d.hang.detected)
            for g in d.process_groups
        ),
        stacks=tuple(pictures.stacks(g, pictures.blamed(d)) for g in d.stack_groups),
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
        parts.append(_named_with_ties(d.symptoms))
    if d.root_causes and not d.cause_open:
        parts.append(f"caused by {_named_with_ties(d.root_causes, lower=True)}")
    elif d.root_causes:
        parts.append("cause unsettled")
    return ", ".join(parts)


def _named_with_ties(labels: Sequence[ScoredLabel], lower: bool = False) -> str:
    """The first label's name, and those the tables show at its percentage (`X, tied with Y`):
    the first alone would be a choice the scores do not make."""
    names = [c.short(x.name, 200) for x in c.tied_at_top(labels)]
    names = [c.lower_first(x) if lower or n else x for n, x in enumerate(names)]
    return ", tied with ".join(names)


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
    return _ties(tuple(shown))


def _ties(items: tuple[_Scored, ...]) -> tuple[_Scored, ...]:
    """Each item shown at the same percentage as the one above it, marked as tied: a list
    whose order says more than its numbers would rank two things the numbers do not."""
    return tuple(
        replace(x, tied=True) if n and x.pct == items[n - 1].pct else x for n, x in enumerate(items)
    )


# --------------------------------------------------------------------------- who


def _who(d: Diagnosis, base: str) -> Who | None:
    if d.first_failure is None and not d.culprit_ranks and d.hang is None:
        return None
    first = None
    if d.first_failure is not None:
        f = d.first_failure
        about = _by_no_rank_about(d)
        first = FirstFailure(
            rank=c.rank_str(f.rank),
            # `localhost` (pdsh's prefix for the launching node) says no machine: the rank alone
            host=c.short(f.host or "", 200) if names_a_machine(f.host) else "",
            time=c.iso_time(f.time, f.time_resolution) if f.time is not None else "",
            where=_where(f.source, f.line, base),
            text=c.short(f.text, 20_000),
            note=wording.by_no_rank(about) if about else _first_failure_note(d, base),
            title=TITLES.first_failure if f.own_error else TITLES.singled_out,
            about=about if "-" in about or "," in about else "",
        )
    return Who(first, c.ranks_str(d.culprit_ranks) if d.culprit_ranks else "", _hang(d))


def _by_no_rank_about(d: Diagnosis) -> str:
    """The ranks a first failure quoted from a shared log (a launcher's console) is about,
    where no rank printed it: its line is a rank's own only when some line of that rank's is
    read from it; else it is about the job, and names every culprit (`2-3`) where the quoted
    rank is one of several. "" where the line is a rank's own."""
    f = d.first_failure
    if f is None or f.rank is None:
        return ""
    source = next((i for i in d.inputs if i.path == f.source), None)
    if source is None or source.rank is not None:
        return ""
    said = [(e.source, e.rank) for e in d.evidence]
    said += [(t.source, t.rank) for t in d.timeline if t.role != "context"]
    if (f.source, f.rank) in said:
        return ""
    several = len(d.culprit_ranks) > 1 and f.rank in d.culprit_ranks
    return c.ranks_str(d.culprit_ranks) if several else str(f.rank)


def _first_failure_note(d: Diagnosis, base: str) -> str:
    """Why rank 2's first failure is quoted from rank 0's input, when it is; why a record, not
    an error, is quoted for the rank that started it; why a line a rank printed names no rank."""
    f = d.first_failure
    if f is None:
        return ""
    if f.rank is None:
        # only a consequence was seen (a lone watchdog timeout): its rank waited, no more
        return wording.reported_the_wait(f.printed_by) if f.printed_by is not None else ""
    source = next((i for i in d.inputs if i.path == f.source), None)
    if not f.own_error and source is not None and source.rank == f.rank:
        # in a hang the others' first errors are their waits timing out, no failure of theirs
        hung = d.hang is not None and d.hang.detected
        earlier = None if hung else first_error(d.timeline)
        failed_first = None
        if earlier is not None and earlier.rank is not None:
            failed_first = (earlier.rank, _where(earlier.source, earlier.line, base))
        return wording.singled_out(f.rank, source.kind, failed_first)
    if source is None or source.rank is None or source.rank == f.rank or f.printed_by == f.rank:
        # a `[rank1]:` line of a console the node's ranks share is rank 1's own
        return ""
    return wording.quoted_from(source.rank, source.kind, f.rank)


def _hang(d: Diagnosis) -> Hang | None:
    h = d.hang
    if h is None:
        return None
    collective = c.hang_collective(d)
    explanation = c.short(h.explanation, 2000)
    if not h.detected:
        # "not detected · lagging ranks 1" reads as a contradiction: say what did happen
        return Hang(False, explanation or "no hang", "", "")
    op, seq = None, None
    if h.collective:
        op = h.collective.op or h.collective.profiling_name
        seq = h.collective.seq
    op_text = c.short(str(op), 80) if op else None
    pg = c.short(h.process_group, 120) if h.process_group else None
    if not h.lagging_ranks and not op and not pg and h.account:
        # nobody is known to be behind and no collective is named (a job that sat on an
        # error until its time limit): what happened says more than "the ranks waited"
        return Hang(True, c.short(h.account, 300), collective, explanation)
    head = wording.hang_headline(
        h.lagging_ranks, op_text, seq, pg, h.waiter, _entered_with_another(d, seq)
    )
    return Hang(True, head, collective, explanation)


def _entered_with_another(d: Diagnosis, seq: int | None) -> tuple[int, ...]:
    """The lagging ranks whose own flight-recorder record reached the collective the others
    waited in (#seq) or beyond: they issued another collective there, they were not behind."""
    if seq is None or d.hang is None:
        return ()
    pg = d.hang.process_group
    reached = {
        p.rank
        for g in d.process_groups
        if g.stuck_seq == seq and (pg is None or pg == g.pg or pg.startswith(f"{g.pg} ("))
        for p in g.ranks
        if p.enqueued is not None and p.enqueued >= seq
    }
    return tuple(r for r in d.hang.lagging_ranks if r in reached)


# --------------------------------------------------------------------------- evidence


# inputs whose evidence is a record triage decoded and words itself (a flight-recorder entry,
# a py-spy stack), not a line the file holds
_RECORD_KINDS = frozenset({SourceKind.FLIGHT_RECORDER, SourceKind.PYSPY})


def _records(d: Diagnosis) -> frozenset[str]:
    """The inputs whose evidence without a line number is a record in triage's words."""
    return frozenset(i.path for i in d.inputs if i.kind in _RECORD_KINDS)


def _evidence(
    evidence: Sequence[Evidence],
    base: str,
    kb: Knowledge | None,
    records: frozenset[str] = frozenset(),
) -> tuple[EvidenceGroup, ...]:
    """Evidence lines folded across ranks: the same message (its numbers, names and paths
    masked as the failure signature masks them) and the same reason make one group. A record
    of a dump (no line of the file) says so where its file is named: its words are triage's."""
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
            who=ranks_phrase(ranks),
            where=_where(e.source, e.line, base)
            + (f" ({wording.RECORD_MARK})" if e.line is None and e.source in records else ""),
            count=len(members),
            why=c.short(e.why, 200),
            text=c.short(e.text, 20_000),
            varies=len(texts) > 1,
        )
        # one line that several rules quote is shown once, with every reason
        first = group.text.split("\n", 1)[0]
        key = (group.where, first)
        key = next((k for k, seen in lines_of.items() if lines and lines <= seen), key)
        # ... and so is one error of the same ranks in two files (a --tee console and the
        # rank's own log): a copy, not a second sign
        key = next(
            (
                k
                for k, g in out.items()
                if group.ranks and g.ranks == group.ranks and g.text.split("\n", 1)[0] == first
            ),
            key,
        )
        seen = out.get(key)
        if seen is None:
            out[key] = group
            lines_of[key] = lines
        elif group.why not in seen.why.split(", "):
            out[key] = replace(seen, why=c.short(f"{seen.why}, {group.why}", 200))
    return tuple(out.values())


# --------------------------------------------------------------------------- timeline

_ROLES = pictures.ROLES
_ROLE_PRIORITY = {"initiating": 0, "context": 1, "cascade": 2}


def _timeline(d: Diagnosis, base: str) -> Timeline:
    entries = d.timeline
    drawn = pictures.window(d)
    span = drawn or c.time_span(entries)
    start = span[0] if span else None
    rows = tuple(
        TimelineRow(
            clock=c.clock_time(e.time, e.resolution)
            if e.time is not None or (e.earliest is None and e.latest is None)
            else "no stamp",
            iso=c.iso_time(e.time, e.resolution)
            if e.time is not None
            else c.bounds(e.earliest, e.latest),
            offset=c.offset(e.time, start, e.resolution)
            if e.time is not None
            else c.bounds(e.earliest, e.latest),
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


# --------------------------------------------------------------------------- flight recorder


# --------------------------------------------------------------------------- py-spy


# --------------------------------------------------------------------------- inputs


def _status(i: InputSummary) -> str:
    problems = [w for w in i.warnings if w not in NOT_FAILURES]
    if problems:
        return "problem"
    if InputNote.BESIDE_LOGS in i.warnings:
        return "set aside"
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
                    warnings=tuple(c.short(w, 400) for w in i.warnings if w not in NOT_FAILURES),
                )
            )
    order = {"problem": 0, "read": 1, "set aside": 2, "empty": 3}
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
    aside = sum(1 for i in inputs if _status(i) == "set aside")
    tail = f"; {problems} could not be read completely" if problems else ""
    tail += f"; {aside} set aside (notes beside the logs)" if aside else ""
    tail += f"; {empty} empty" if empty else ""
    return f"{len(inputs)} {noun}{under}: {parts}{tail}"


def generated() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
