"""Hang localization from flight-recorder dumps: who is behind, who is missing, who disagrees.

Per process group we index each rank's ring buffer by collective sequence id (one dict per
rank, built in one pass), then read off: the last enqueued / started / completed collective of
every rank, the ranks behind the others, the member ranks without any dump, and the first
collective where ranks disagree on op, sizes or dtypes. Everything is linear in the number of
entries, so 1,024 ranks x 2,000 entries stay well under a few seconds.

Unlike torch's `fr_trace` this does not need every rank's dump, a clean `<prefix><rank>`
file naming, a correct `pg_config` (gloo writes `{'': ...}`) or a single schema version.
Ring buffers that wrapped at different points are compared only on the window every rank
still holds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from triage.analysis.ranks import format_ranks, pg_ranks
from triage.knowledge.frames import LibraryFrames
from triage.model import (
    CollectiveProgress,
    Event,
    EvidenceRef,
    Finding,
    FlightRecorderDump,
    FlightRecorderEntry,
    GroupProgress,
)

_P2P_OPS = {"send", "recv", "isend", "irecv", "recv_any_source", "batch_isend_irecv"}
# ops whose per-rank sizes legitimately differ (uneven splits), so only op and dtype are compared
_UNEVEN_OPS = {"all_to_all", "all_to_all_single", "alltoall", "alltoall_base", "gather", "scatter"}
_DEFAULT_PG_DESCS = {"default_pg", "default"}


@dataclass(frozen=True)
class FRDump:
    rank: int
    dump: FlightRecorderDump
    event: Event
    attempt: int | None = None  # elastic restart attempt, from the dump's folder


@dataclass
class RankPGState:
    """One rank's view of one process group: its records keyed by collective sequence id."""

    rank: int
    by_seq: dict[int, FlightRecorderEntry]  # the first record of each sequence id
    first_seq: int | None = None
    last_enqueued: int | None = None
    last_started: int | None = None
    last_completed: int | None = None
    coalesced: dict[int, list[FlightRecorderEntry]] = field(default_factory=dict)

    def entries_at(self, seq: int) -> list[FlightRecorderEntry]:
        got = self.coalesced.get(seq)
        if got is not None:
            return got
        one = self.by_seq.get(seq)
        return [one] if one is not None else []


@dataclass
class PGReport:
    pg: str
    desc: str
    members: tuple[int, ...]
    states: dict[int, RankPGState]
    missing: tuple[int, ...]  # members with no dump at all
    lagging: tuple[int, ...]  # dumped, but behind the furthest rank
    stuck_seq: int | None  # the collective some ranks wait in
    stuck_entry: FlightRecorderEntry | None
    has_states: bool  # NCCL-era dumps: started/completed are meaningful
    mismatch: dict[str, Any] | None = None
    not_started: tuple[int, ...] = ()  # all enqueued the stuck op, these never started it
    sources: dict[int, str] = field(default_factory=dict)  # rank -> its dump's path
    # lagging rank -> the other process group its latest record is in: it is waiting in
    # another group's collective, not busy outside collectives
    elsewhere: dict[int, str] = field(default_factory=dict)
    call_site: str | None = None  # the user's frame that called the stuck collective


@dataclass
class FRAnalysis:
    reports: list[PGReport] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    # rank -> the culprit signals it gave (`rules/culprit.yaml`, group flight_recorder)
    suspects: dict[int, set[str]] = field(default_factory=dict)
    hang_pg: PGReport | None = None
    timeout_ms: int | None = None
    comm_lib_versions: dict[int, str] = field(default_factory=dict)
    # (pg, seq) -> {rank: time_created_ns}: collectives every dumped rank holds, for clocks
    anchors: dict[tuple[str, int], dict[int, int]] = field(default_factory=dict)
    ranks_dumped: tuple[int, ...] = ()


_OP_CACHE: dict[str, str] = {}


def _op(profiling_name: str) -> str:
    """`nccl:send 0->1` -> `send`; memoised because a dump repeats a handful of names."""
    op = _OP_CACHE.get(profiling_name)
    if op is None:
        op = profiling_name.split(":", 1)[-1].split(" ", 1)[0]
        if len(_OP_CACHE) < 4096:
            _OP_CACHE[profiling_name] = op
    return op


def _signature(entries: list[FlightRecorderEntry]) -> tuple[Any, ...]:
    sig = []
    for e in entries:
        op = _op(e.profiling_name)
        if op in _UNEVEN_OPS:
            sig.append((op, e.input_dtypes, e.output_dtypes))
        else:
            sig.append((op, e.input_sizes, e.output_sizes, e.input_dtypes, e.output_dtypes))
    return tuple(sig)


def _same(a: FlightRecorderEntry, b: FlightRecorderEntry) -> bool:
    """Do two ranks' records of one collective agree? (the hot loop: cheap checks first)"""
    if a is b:
        return True
    if a.input_dtypes != b.input_dtypes or a.output_dtypes != b.output_dtypes:
        return False
    op = _op(a.profiling_name)
    if op != _op(b.profiling_name):
        return False
    if op in _UNEVEN_OPS:
        return True
    return a.input_sizes == b.input_sizes and a.output_sizes == b.output_sizes


def _dedupe(dumps: Sequence[FRDump]) -> list[FRDump]:
    """Keep one dump per rank: the pickle and JSON of one rank are the same data, and after
    elastic restarts only the last attempt's dumps describe the final failure."""
    best: dict[int, FRDump] = {}

    def key(d: FRDump) -> tuple[int, int, bool]:
        return (d.attempt or 0, len(d.dump.entries), _has_frames(d))

    for d in dumps:
        old = best.get(d.rank)
        if old is None or key(d) > key(old):
            best[d.rank] = d
    return [best[r] for r in sorted(best)]


def _has_frames(d: FRDump) -> bool:
    return any(e.frames for e in d.dump.entries[-3:])


def _index(dump: FRDump, pg_desc: dict[str, str]) -> dict[str, RankPGState]:
    """One rank's ring buffer -> pg -> records by sequence id and positions.

    Written as whole-list comprehensions rather than one Python loop per record: this is the
    hot path of a 1,024-rank x 2,000-entry job.
    """
    entries = dump.dump.entries
    if not entries:
        return {}
    pgs = {e.pg_name for e in entries}
    p2p_names = {n for n in {e.profiling_name for e in entries} if _op(n) in _P2P_OPS}
    has_p2p_flag = any(e.is_p2p for e in entries)
    mine: dict[str, RankPGState] = {}
    for pg in pgs:
        sel = list(entries) if len(pgs) == 1 else [e for e in entries if e.pg_name == pg]
        if p2p_names or has_p2p_flag:
            # p2p ids count per pair of peers, not per group
            sel = [e for e in sel if not e.is_p2p and e.profiling_name not in p2p_names]
        if not sel:
            continue
        if sel[0].pg_desc and pg not in pg_desc:
            pg_desc[pg] = sel[0].pg_desc
        seqs = [e.collective_seq_id for e in sel]
        st = RankPGState(dump.rank, dict(zip(reversed(seqs), reversed(sel), strict=True)))
        if len(st.by_seq) != len(sel):  # coalesced ops share one sequence id
            for seq, n in Counter(seqs).items():
                if n > 1:
                    st.coalesced[seq] = [e for e in sel if e.collective_seq_id == seq]
        st.first_seq = min(seqs)
        st.last_enqueued = max(seqs)
        # records are in creation order and sequence ids grow with it: scan from the end
        for e in reversed(sel):
            if e.state == "completed":
                st.last_completed = e.collective_seq_id
                if st.last_started is None:
                    st.last_started = e.collective_seq_id
                break
            if e.state == "started" and st.last_started is None:
                st.last_started = e.collective_seq_id
        mine[pg] = st
    return mine


def analyze(
    dumps: Sequence[FRDump], library: LibraryFrames, world_size: int | None = None
) -> FRAnalysis:
    """Each process group's progress across the dumps, and who is behind, missing or odd.
    `library`: the run's `kb.frames`, which finds the user's frame that called a collective."""
    out = FRAnalysis()
    dumps = _dedupe(dumps)
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
        mine = _index(d, pg_desc)
        if d.dump.entries_total is not None:
            partial.add(d.rank)
            _fill_from_status(mine, d)
        for pg, st in mine.items():
            per_pg.setdefault(pg, {})[d.rank] = st
        if d.dump.entries and d.dump.entries[-1].timeout_ms:
            timeouts[d.dump.entries[-1].timeout_ms] += 1
        for name, desc in d.dump.pg_desc.items():
            pg_desc.setdefault(name, desc)
    if timeouts:
        out.timeout_ms = timeouts.most_common(1)[0][0]

    dumped = {d.rank for d in dumps}
    for pg, ranks in per_pg.items():
        desc = pg_desc.get(pg, "")
        members = _members(pg, desc, dumps, ranks, world_size)
        report = _pg_report(pg, desc, members, ranks, dumped, partial)
        report.sources = {d.rank: d.event.source for d in dumps}
        report.call_site = _call_site(report.stuck_entry, library)
        latest = {d.rank: d.dump.entries[-1] for d in dumps if d.dump.entries}
        report.elsewhere = {
            r: latest[r].pg_name
            for r in report.lagging
            if r in latest and latest[r].pg_name != pg and not latest[r].is_p2p
        }
        out.reports.append(report)
        _anchor(out, pg, ranks)

    for report in out.reports:
        out.findings.extend(_findings(report, out.suspects))
    if partial:
        out.findings.append(_window_note([d.dump for d in dumps if d.rank in partial]))

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


def _window_note(dumps: Sequence[FlightRecorderDump]) -> Finding:
    """Says that a big job's dumps were read in part, and how to read them whole."""
    kept = max(len(d.entries) for d in dumps)
    held = max(d.entries_total or 0 for d in dumps)
    return Finding(
        kind="fr_window",
        summary=(
            f"flight recorder: {len(dumps)} dumps read in part (a big job): the last {kept} "
            f"of up to {held:,} entries each, and every group's last enqueued, started and "
            "completed collective from pg_status; `--fr-entries 0` reads them whole"
        ),
        facts={"dumps": len(dumps), "entries_kept": kept, "entries_held": held},
    )


def _fill_from_status(mine: dict[str, RankPGState], d: FRDump) -> None:
    """A dump read in part (a big job: only its last entries) still states, in pg_status,
    the last collective each group enqueued, started and completed: that fills in groups
    the kept entries do not show, and ends the kept records cannot reach."""
    for pg, status in d.dump.pg_status.items():
        ends = {
            name: value if value >= 0 else None
            for name, value in (
                ("last_enqueued", status.get("last_enqueued_collective", -1)),
                ("last_started", status.get("last_started_collective", -1)),
                ("last_completed", status.get("last_completed_collective", -1)),
            )
        }
        st = mine.get(pg)
        if st is None:
            if ends["last_enqueued"] is not None:
                mine[pg] = RankPGState(d.rank, {}, **ends)
            continue
        for name, value in ends.items():
            if getattr(st, name) is None and value is not None:
                setattr(st, name, value)


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
            states[r] = RankPGState(r, {})
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
    mismatch = _first_mismatch(states)
    if mismatch and (stuck_seq is None or mismatch["seq"] < stuck_seq):
        # the first collective the ranks disagree on is where the job went wrong: what the
        # waiters entered after it timed out (a `finally:` barrier) is no longer the hang
        stuck_seq = mismatch["seq"]
    if stuck_seq is not None:
        # the collective the others waited in is theirs, not the odd rank's: rank 2's barrier
        # at #22 is not what ranks 0-1 waited in when their #22 was an all_reduce
        odd = set(lagging) | set(mismatch["ranks"] if mismatch and not mismatch["tie"] else ())
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


def _first_mismatch(states: dict[int, RankPGState]) -> dict[str, Any] | None:
    holders = [s for s in states.values() if s.by_seq]
    if len(holders) < 2:
        return None
    # compare only where every rank still holds records: buffers wrap at different points
    start = max(s.first_seq for s in holders if s.first_seq is not None)
    ref = max(holders, key=lambda s: len(s.by_seq))
    ref_seqs = ref.by_seq
    ref_run = _Run(ref)
    first: int | None = None
    for s in holders:
        if s is ref:
            continue
        if not s.coalesced and not ref.coalesced and ref_run.agrees_with(_Run(s), start):
            continue  # the common case: identical records over the shared window, checked in C
        # a field-by-field screen over all records, then the exact check on the few hits
        hits = [
            seq
            for seq, e in s.by_seq.items()
            if (w := ref_seqs.get(seq)) is not None
            and w is not e
            and (
                w.profiling_name != e.profiling_name
                or w.input_dtypes != e.input_dtypes
                or w.input_sizes != e.input_sizes
                or w.output_sizes != e.output_sizes
                or w.output_dtypes != e.output_dtypes
            )
        ]
        hits += [seq for seq in s.coalesced if seq in ref_seqs]
        hits += [seq for seq in ref.coalesced if seq in s.by_seq]
        for seq in sorted(set(hits)):
            if seq < start or (first is not None and seq >= first):
                continue
            if not _same(ref_seqs[seq], s.by_seq[seq]) or _signature(
                s.entries_at(seq)
            ) != _signature(ref.entries_at(seq)):
                first = seq
                break
    if first is None:
        return None
    sigs = {s.rank: _signature(s.entries_at(first)) for s in holders if first in s.by_seq}
    counts = Counter(sigs.values())
    ranked = counts.most_common()
    clear = len(ranked) > 1 and ranked[0][1] > ranked[1][1]
    kind = _mismatch_kind(list(counts))
    departed = _departed(holders, first) if kind == "op" else None
    if clear:
        majority = ranked[0][0]
        odd = sorted(r for r, sig in sigs.items() if sig != majority)
    elif departed:
        # a tie, but one side stopped issuing the collective every rank had been repeating
        # (it left the loop): that side is the odd one out
        odd, clear = departed, True
    else:
        odd = sorted(sigs)  # a tie (two ranks): FR alone cannot say who is wrong
    per_rank = {}
    for r, s in states.items():
        e = s.by_seq.get(first)
        if e is not None:
            per_rank[r] = {
                "op": _op(e.profiling_name),
                "profiling_name": e.profiling_name,
                "input_sizes": [list(x) for x in e.input_sizes],
                "output_sizes": [list(x) for x in e.output_sizes],
                "dtypes": list(e.input_dtypes),
            }
    return {
        "seq": first,
        "kind": kind,
        "ranks": odd,
        "tie": not clear,
        "per_rank": per_rank,
        # how the ranks parted: `left_loop` when some went on repeating the collective all
        # had been issuing and the others did something new (they ran out of work first);
        # `diverged` when each side issued a different new collective (one skipped or added
        # a call); `differing` for one collective with different sizes or dtypes
        "pattern": "differing" if kind != "op" else "left_loop" if departed else "diverged",
        "departed": departed or [],
    }


# how far back a collective counts as "the one every rank had been repeating"
_REPEAT_WINDOW = 64


def _departed(holders: Sequence[RankPGState], seq: int) -> list[int]:
    """For collective `seq`, where ranks issued different ops: the ranks that stopped issuing
    a collective the whole group had been repeating just before, while the other ranks issued
    it once more. Empty when neither side repeats (or both do)."""
    recent: set[tuple[Any, ...]] = set()
    for s in holders:
        recent |= {
            _FINGERPRINT(e)
            for k in range(max(seq - _REPEAT_WINDOW, s.first_seq or 0), seq)
            if (e := s.by_seq.get(k)) is not None
        }
    going_on = {s.rank for s in holders if (e := s.by_seq.get(seq)) and _FINGERPRINT(e) in recent}
    stopped = {s.rank for s in holders if seq in s.by_seq} - going_on
    return sorted(stopped) if going_on and stopped else []


_FINGERPRINT = attrgetter(
    "profiling_name", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes"
)


class _Run:
    """One rank's records as a gap-free run of sequence ids, when they are one (usual)."""

    def __init__(self, st: RankPGState) -> None:
        self.first = st.first_seq or 0
        self.values = list(st.by_seq.values())
        last = st.last_enqueued if st.last_enqueued is not None else -1
        # by_seq keeps insertion order, and sequence ids grow with it
        self.contiguous = last - self.first + 1 == len(self.values)
        self._fps: list[tuple[Any, ...]] | None = None

    def fingerprints(self) -> list[tuple[Any, ...]]:
        if self._fps is None:
            self._fps = list(map(_FINGERPRINT, self.values))
        return self._fps

    def agrees_with(self, other: _Run, start: int) -> bool:
        """True when both runs hold equal records on every shared sequence id from `start`."""
        if not (self.contiguous and other.contiguous):
            return False
        lo = max(start, self.first, other.first)
        hi = min(self.first + len(self.values), other.first + len(other.values))
        if hi <= lo:
            return True
        mine = self.fingerprints()[lo - self.first : hi - self.first]
        theirs = list(map(_FINGERPRINT, other.values[lo - other.first : hi - other.first]))
        return mine == theirs


def _mismatch_kind(sigs: list[tuple[Any, ...]]) -> str:
    ops = {tuple(x[0] for x in s) for s in sigs}
    if len(ops) > 1:
        return "op"
    dtypes = {tuple(tuple(x[-2]) + tuple(x[-1]) for x in s) for s in sigs}
    if len(dtypes) > 1:
        return "dtype"
    return "size"


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
            t = st.by_seq[seq].time_created_ns
            if t:
                times[r] = t
        if len(times) > 1:
            out.anchors[(pg, seq)] = times


def _describe(e: FlightRecorderEntry | None, call_site: str | None) -> dict[str, Any]:
    if e is None:
        return {}
    return {
        "op": _op(e.profiling_name),
        "profiling_name": e.profiling_name,
        "input_sizes": [list(x) for x in e.input_sizes],
        "output_sizes": [list(x) for x in e.output_sizes],
        "dtypes": list(e.input_dtypes),
        "timeout_ms": e.timeout_ms,
        **({"call_site": call_site} if call_site else {}),
    }


def _call_site(e: FlightRecorderEntry | None, library: LibraryFrames) -> str | None:
    """The user's frame that issued the collective (NCCL-era dumps record Python frames)."""
    for f in e.frames if e is not None else ():
        if not library.is_library(f.filename):
            return f"{f.function} ({f.filename}:{f.line})"
    return None


def collective_of(report: PGReport) -> dict[str, Any]:
    d = _describe(report.stuck_entry, report.call_site)
    d["seq"] = report.stuck_seq
    return d


def _ev(report: PGReport, rank: int, text: str) -> EvidenceRef:
    """Evidence that points at the rank's own dump file (or says none exists)."""
    source = report.sources.get(rank, f"flight recorder (no dump from rank {rank})")
    return EvidenceRef(source=source, line=None, rank=rank, text=text)


def _findings(report: PGReport, suspects: dict[int, set[str]]) -> list[Finding]:
    out: list[Finding] = []
    label = f"{report.pg}" + (f" ({report.desc})" if report.desc else "")
    coll = collective_of(report)
    op = coll.get("op") or "a collective"
    lasts = {
        r: (s.last_enqueued, s.last_started, s.last_completed)
        for r, s in sorted(report.states.items())
    }
    if report.missing:
        for r in report.missing:
            suspects.setdefault(r, set()).add("fr_missing_dump")
        out.append(
            Finding(
                kind="missing_rank",
                summary=(
                    f"process group {label}: no flight-recorder dump from rank(s) "
                    f"{format_ranks(report.missing)} of {len(report.members)} members; the rank "
                    "that died or is stuck in teardown is often the one that did not dump"
                ),
                ranks=report.missing,
                evidence=tuple(
                    _ev(report, r, f"rank {r}: last enqueued {lasts[r][0]}")
                    for r in list(lasts)[:3]
                ),
                facts={
                    "pg": report.pg,
                    "members": len(report.members),
                    "missing": list(report.missing),
                },
            )
        )
    if report.lagging:
        furthest = max(s.last_enqueued or 0 for s in report.states.values())
        few = len(report.lagging) * 2 <= len(report.states)
        for r in report.lagging:
            suspects.setdefault(r, set()).add("fr_lagging_few" if few else "fr_lagging_many")
        ahead = sorted(set(report.states) - set(report.lagging))
        where = ""
        if report.elsewhere:
            groups = ", ".join(sorted(set(report.elsewhere.values())))
            where = f", and their latest record is on process group {groups}"
        # each lagging rank's own last collective when they differ (#3 and #2 are not "#2"),
        # and the op of the furthest one, which is the ranks ahead's, not the stuck one's
        stops = sorted({lasts[r][0] or 0 for r in report.lagging})
        stopped = (
            f"collective #{stops[0]}"
            if len(stops) == 1
            else "collectives "
            + ", ".join(f"#{lasts[r][0]} (rank {r})" for r in report.lagging[:8])
        )
        far = next((g for r in ahead if (g := report.states[r].by_seq.get(furthest))), None)
        far_op = f" ({_op(far.profiling_name)})" if far is not None else ""
        out.append(
            Finding(
                kind="lagging_rank",
                summary=(
                    f"process group {label}: rank(s) {format_ranks(report.lagging)} stopped at "
                    f"{stopped} while rank(s) {format_ranks(ahead)} went on to #{furthest}"
                    f"{far_op}; they never entered the collective the others wait in{where}"
                ),
                ranks=report.lagging,
                evidence=tuple(
                    _ev(report, r, f"rank {r}: last enqueued collective #{lasts[r][0]}")
                    for r in (list(report.lagging)[:3] + ahead[:2])
                ),
                facts={
                    "pg": report.pg,
                    "seq": report.stuck_seq,
                    "op": coll.get("op"),
                    "last_enqueued": {r: v[0] for r, v in lasts.items()},
                    **(
                        {"waits_in_group": sorted(set(report.elsewhere.values()))}
                        if report.elsewhere
                        else {}
                    ),
                },
            )
        )
    if report.not_started:
        for r in report.not_started:
            suspects.setdefault(r, set()).add("fr_not_started")
        out.append(
            Finding(
                kind="lagging_rank",
                summary=(
                    f"process group {label}: every rank enqueued collective #{report.stuck_seq} "
                    f"({op}) but rank(s) {format_ranks(report.not_started)} never started it "
                    "(their GPU stream is stuck in earlier work)"
                ),
                ranks=report.not_started,
                evidence=tuple(
                    _ev(
                        report,
                        r,
                        f"rank {r}: last started #{lasts[r][1]}, completed #{lasts[r][2]}",
                    )
                    for r in report.not_started[:3]
                ),
                facts={"pg": report.pg, "seq": report.stuck_seq, "op": coll.get("op")},
            )
        )
    if report.mismatch:
        m = report.mismatch
        for r in m["ranks"]:
            suspects.setdefault(r, set()).add("fr_mismatch_tie" if m["tie"] else "fr_mismatch_odd")
        per = m["per_rank"]
        parts = []
        for sig_ranks in _group_by_sig(per):
            ex = per[sig_ranks[0]]
            parts.append(
                f"rank {format_ranks(sig_ranks)}: {ex['op']} {ex['input_sizes']} "
                f"{','.join(ex['dtypes'])}"
            )
        how = ""
        if m["pattern"] == "left_loop":
            how = (
                f"; rank(s) {format_ranks(m['departed'])} stopped issuing the collective the "
                "group had been repeating: they left the loop before the others"
            )
        out.append(
            Finding(
                kind="collective_mismatch",
                summary=(
                    f"process group {label}: collective #{m['seq']} differs in {m['kind']} across "
                    f"ranks ({'; '.join(parts[:4])}){how}"
                ),
                ranks=tuple(m["ranks"]),
                evidence=tuple(
                    _ev(
                        report,
                        r,
                        f"rank {r}: {per[r]['profiling_name']} "
                        f"{per[r]['input_sizes']} {per[r]['dtypes']}",
                    )
                    for r in list(per)[:4]
                ),
                facts={
                    "pg": report.pg,
                    "seq": m["seq"],
                    "mismatch": m["kind"],
                    "pattern": m["pattern"],
                    "op": {r: v["op"] for r, v in per.items()},
                    "sizes": {r: v["input_sizes"] for r, v in per.items()},
                    "dtypes": {r: v["dtypes"] for r, v in per.items()},
                },
            )
        )
    return out


def _group_by_sig(per: dict[int, dict[str, Any]]) -> list[list[int]]:
    groups: dict[str, list[int]] = {}
    for r, v in sorted(per.items()):
        key = repr((v["op"], v["input_sizes"], v["dtypes"]))
        groups.setdefault(key, []).append(r)
    return sorted(groups.values(), key=len)


def status_table(
    analysis: FRAnalysis,
) -> dict[str, dict[int, tuple[int | None, int | None, int | None]]]:
    """pg -> rank -> (last enqueued, last started, last completed), for facts and reports."""
    return {
        r.pg: {
            rank: (s.last_enqueued, s.last_started, s.last_completed)
            for rank, s in sorted(r.states.items())
        }
        for r in analysis.reports
    }


def progress(analysis: FRAnalysis) -> tuple[GroupProgress, ...]:
    """Each process group's last collectives per rank, for the reports' table."""
    out = []
    for r in analysis.reports:
        ranks = tuple(
            CollectiveProgress(
                rank,
                s.last_enqueued,
                s.last_started if r.has_states else None,
                s.last_completed if r.has_states else None,
            )
            for rank, s in sorted(r.states.items())
        )
        op = _op(r.stuck_entry.profiling_name) if r.stuck_entry is not None else None
        out.append(GroupProgress(r.pg, r.desc, ranks, r.missing, r.lagging, r.stuck_seq, op))
    return tuple(out)
