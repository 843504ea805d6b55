"""One rank's ring buffer indexed per process group by collective sequence id."""

from __future__ import annotations

from collections.abc import Sequence

from triage.analysis.flight_recorder.records import FRDump, RankPGState, SeqRows, op_of
from triage.model import EntryTable

__all__ = ["dedupe", "fill_from_status", "rank_states"]

_P2P_OPS = {"send", "recv", "isend", "irecv", "recv_any_source", "batch_isend_irecv"}


def dedupe(dumps: Sequence[FRDump]) -> list[FRDump]:
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
    return any(EntryTable.of(d.dump.entries)[-3:].field("frames"))


def rank_states(dump: FRDump, pg_desc: dict[str, str]) -> dict[str, RankPGState]:
    """One rank's ring buffer -> pg -> records by sequence id and positions.

    Read field by field from the dump's EntryTable, whole columns at a time rather than one
    Python loop per record: this is the hot path of a 1,024-rank x 2,000-entry job, and
    nothing here keeps an object per record.
    """
    table = EntryTable.of(dump.dump.entries)
    n = len(table)
    if not n:
        return {}
    pg_names = table.field("pg_name")
    # in the order the ring buffer first names them: a set's order changes with the hash seed,
    # and with it the order of the reports' process-group tables
    pgs = dict.fromkeys(pg_names)
    names = table.field("profiling_name")
    p2p_names = {n for n in set(names) if op_of(n) in _P2P_OPS}
    p2p_flags = table.field("is_p2p")
    has_p2p_flag = any(p2p_flags)
    all_seqs = table.field("collective_seq_id")
    all_states = table.field("state")
    mine: dict[str, RankPGState] = {}
    for pg in pgs:
        rows: Sequence[int] = (
            range(n) if len(pgs) == 1 else [i for i, p in enumerate(pg_names) if p == pg]
        )
        if p2p_names or has_p2p_flag:
            # p2p ids count per pair of peers, not per group
            rows = [i for i in rows if not p2p_flags[i] and names[i] not in p2p_names]
        if not rows:
            continue
        desc = table.value(rows[0], "pg_desc")
        if desc and pg not in pg_desc:
            pg_desc[pg] = desc
        seqs = all_seqs if isinstance(rows, range) else [all_seqs[i] for i in rows]
        st = RankPGState(dump.rank, SeqRows(table, rows, seqs))
        st.first_seq = min(seqs)
        st.last_enqueued = max(seqs)
        # records are in creation order and sequence ids grow with it: scan from the end
        for row, seq in zip(reversed(rows), reversed(seqs), strict=True):
            state = all_states[row]
            if state == "completed":
                st.last_completed = seq
                if st.last_started is None:
                    st.last_started = seq
                break
            if state == "started" and st.last_started is None:
                st.last_started = seq
        mine[pg] = st
    return mine


def fill_from_status(mine: dict[str, RankPGState], d: FRDump) -> None:
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
                mine[pg] = RankPGState(d.rank, **ends)
            continue
        for name, value in ends.items():
            if getattr(st, name) is None and value is not None:
                setattr(st, name, value)
