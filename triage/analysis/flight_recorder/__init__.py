"""Hang localization from flight-recorder dumps: who is behind, who is missing, who disagrees.

Per process group we index each rank's ring buffer by collective sequence id (rows of the
dump's EntryTable, read a field at a time: no object per record), then read off: the last
enqueued / started / completed collective of every rank, the ranks behind the others, the
member ranks without any dump, and the first collective where ranks disagree on op, sizes or
dtypes. Everything is linear in the number of entries, so 1,024 ranks x 2,000 entries stay
well under a few seconds.

Unlike torch's `fr_trace` this does not need every rank's dump, a clean `<prefix><rank>`
file naming, a correct `pg_config` (gloo writes `{'': ...}`) or a single schema version.
Ring buffers that wrapped at different points are compared only on the window every rank
still holds.

The package's modules: `records` (what the analysis holds: a rank's view of a group and its
records as table rows, a group's report, the whole analysis), `index` (one rank's ring buffer
indexed by sequence id), `mismatch` (the first collective the ranks disagree on) and
`findings` (what a person reads: findings, the reports' progress table, the stuck
collective). This module joins them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from triage.analysis.flight_recorder.findings import (
    call_site_of,
    collective_of,
    findings_of,
    progress,
    status_table,
    window_note,
)
from triage.analysis.flight_recorder.index import dedupe, fill_from_status, rank_states
from triage.analysis.flight_recorder.mismatch import first_mismatch
from triage.analysis.flight_recorder.records import (
    FRAnalysis,
    FRDump,
    PGReport,
    RankPGState,
)
from triage.analysis.ranks import pg_ranks
from triage.knowledge.frames import LibraryFrames
from triage.model import FlightRecorderEntry

__all__ = [
    "FRAnalysis",
    "FRDump",
    "PGReport",
    "RankPGState",
    "analyze",
    "collective_of",
    "progress",
    "status_table",
]

_DEFAULT_PG_DESCS = {"default_pg", "default"}


def analyze(
    dumps: Sequence[FRDump], library: LibraryFrames, world_size: int | None = None
) -> FRAnalysis:
    """Each process group's progress across the dumps, and who is behind, missing or odd.
    `library`: the run's `kb.frames`, which finds the user's frame that called a collective."""
    out = FRAnalysis()
    dumps = dedupe(dumps)
    if not dumps:
        return out
    out.ranks_dumped = tuple(d.rank for d in dumps)
    per_pg: dict[str, dict[int, RankPGState]] = {}
    pg_desc: dict[str, str] = {}
    timeouts: Counter[int] = Counter()
    partial: set[int] = set()  # ranks whose dump was read in part: silence proves nothing
    for d in dumps:
        if d.dump.comm_lib_version:
            out.comm_lib_versions[d.rank] = d.dump.comm_lib_version
        mine = rank_states(d, pg_desc)
        if d.dump.entries_total is not None:
            partial.add(d.rank)
            fill_from_status(mine, d)
        for pg, st in mine.items():
            per_pg.setdefault(pg, {})[d.rank] = st
        if d.dump.entries and d.dump.entries[-1].timeout_ms:
            timeouts[d.dump.entries[-1].timeout_ms] += 1
        for name, desc in d.dump.pg_desc.items():
            pg_desc.setdefault(name, desc)
    if timeouts:
        out.timeout_ms = timeouts.most_common(1)[0][0]

    dumped = {d.rank for d in dumps}
    latest = {d.rank: d.dump.entries[-1] for d in dumps if d.dump.entries}
    for pg, ranks in per_pg.items():
        desc = pg_desc.get(pg, "")
        members = _members(pg, desc, dumps, ranks, world_size)
        report = _pg_report(pg, desc, members, ranks, dumped, partial)
        report.sources = {d.rank: d.event.source for d in dumps}
        report.call_site = call_site_of(report.stuck_entry, library)
        report.elsewhere = {
            r: latest[r].pg_name
            for r in report.lagging
            if r in latest and latest[r].pg_name != pg and not latest[r].is_p2p
        }
        out.reports.append(report)
        _anchor(out, pg, ranks)

    for report in out.reports:
        out.findings.extend(findings_of(report, out.suspects))
    if partial:
        out.findings.append(window_note([d.dump for d in dumps if d.rank in partial]))

    candidates = [r for r in out.reports if r.lagging or r.missing or r.not_started or r.mismatch]
    if candidates:
        # the widest group with a problem; ties go to the earliest stuck collective
        out.hang_pg = max(
            candidates,
            key=lambda r: (bool(r.lagging or r.missing), len(r.members), -(r.stuck_seq or 0)),
        )
    return out


def _members(
    pg: str,
    desc: str,
    dumps: Sequence[FRDump],
    ranks: dict[int, RankPGState],
    world_size: int | None,
) -> tuple[int, ...]:
    votes: Counter[tuple[int, ...]] = Counter()
    for d in dumps:
        got = pg_ranks(d.dump.pg_config.get(pg, ()))
        if got:
            votes[got] += 1
    if votes:
        return tuple(sorted(votes.most_common(1)[0][0]))
    is_default = desc in _DEFAULT_PG_DESCS or pg == "0"
    if is_default and world_size:
        return tuple(range(world_size))
    if is_default:
        # gloo writes pg_config as {'': {'ranks': '[0, 1]'}}: usable for the only group
        for d in dumps:
            got = pg_ranks(d.dump.pg_config.get("", ()))
            if got:
                votes[got] += 1
        if votes:
            return tuple(sorted(votes.most_common(1)[0][0]))
    # fall back to the ranks whose dumps hold this group (fr_trace's KeyError case)
    return tuple(sorted(ranks))


def _pg_report(
    pg: str,
    desc: str,
    members: tuple[int, ...],
    ranks: dict[int, RankPGState],
    dumped: set[int],
    partial: set[int],
) -> PGReport:
    states = dict(ranks)
    # a member whose whole dump holds no record of this group never entered it
    for r in members:
        if r in dumped and r not in partial and r not in states:
            states[r] = RankPGState(r)
    missing = tuple(r for r in members if r not in dumped)
    has_states = any(s.last_started is not None for s in states.values())
    furthest = max(
        (s.last_enqueued for s in states.values() if s.last_enqueued is not None), default=None
    )
    lagging: tuple[int, ...] = ()
    stuck_seq: int | None = None
    stuck_entry: FlightRecorderEntry | None = None
    not_started: tuple[int, ...] = ()
    if furthest is not None:
        lagging = tuple(sorted(r for r, s in states.items() if (s.last_enqueued or 0) < furthest))
        if lagging:
            stuck_seq = min(states[r].last_enqueued or 0 for r in lagging) + 1
        elif has_states:
            unfinished = [r for r, s in states.items() if (s.last_completed or -1) < furthest]
            if unfinished:
                stuck_seq = furthest
                started = [r for r in unfinished if (states[r].last_started or -1) >= furthest]
                if started:
                    # everyone enqueued it, some launched it: the others are stuck before it
                    not_started = tuple(sorted(set(unfinished) - set(started)))
        elif missing:
            stuck_seq = furthest
    mismatch = first_mismatch(pg, states)
    if mismatch and (stuck_seq is None or mismatch.seq < stuck_seq):
        # the first collective the ranks disagree on is where the job went wrong: what the
        # waiters entered after it timed out (a `finally:` barrier) is no longer the hang
        stuck_seq = mismatch.seq
    if stuck_seq is not None:
        # the collective the others waited in is theirs, not the odd rank's: rank 2's barrier
        # at #22 is not what ranks 0-1 waited in when their #22 was an all_reduce
        odd = set(lagging) | set(mismatch.ranks if mismatch and not mismatch.tie else ())
        order = sorted(states.values(), key=lambda s: s.rank in odd)
        stuck_entry = next((g for s in order if (g := s.by_seq.get(stuck_seq)) is not None), None)
    report = PGReport(
        pg=pg,
        desc=desc,
        members=members,
        states=states,
        missing=missing,
        lagging=lagging,
        stuck_seq=stuck_seq,
        stuck_entry=stuck_entry,
        has_states=has_states,
        not_started=not_started,
    )
    report.mismatch = mismatch
    return report


def _anchor(out: FRAnalysis, pg: str, ranks: dict[int, RankPGState]) -> None:
    """Keep the creation times of the last few collectives that every dumped rank holds."""
    if len(ranks) < 2:
        return
    common: set[int] | None = None
    for st in ranks.values():
        top = st.last_enqueued or 0
        keys = {s for s in range(top - 63, top + 1) if s in st.by_seq}
        common = keys if common is None else common & keys
    for seq in sorted(common or ())[-16:]:
        times = {}
        for r, st in ranks.items():
            t = st.by_seq.value(seq, "time_created_ns")
            if t:
                times[r] = t
        if len(times) > 1:
            out.anchors[(pg, seq)] = times
