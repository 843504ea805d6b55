"""One rank's ring buffer indexed per process group by collective sequence id."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from triage.analysis.flight_recorder.records import FRDump, RankPGState, op_of

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
    return any(e.frames for e in d.dump.entries[-3:])


def rank_states(dump: FRDump, pg_desc: dict[str, str]) -> dict[str, RankPGState]:
    """One rank's ring buffer -> pg -> records by sequence id and positions.

    Written as whole-list comprehensions rather than one Python loop per record: this is the
    hot path of a 1,024-rank x 2,000-entry job.
    """
    entries = dump.dump.entries
    if not entries:
        return {}
    # in the order the ring buffer first names them: a set's order changes with the hash seed,
    # and with it the order of the reports' process-group tables
    pgs = dict.fromkeys(e.pg_name for e in entries)
    p2p_names = {n for n in {e.profiling_name for e in entries} if op_of(n) in _P2P_OPS}
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
                mine[pg] = RankPGState(d.rank, {}, **ends)
            continue
        for name, value in ends.items():
            if getattr(st, name) is None and value is not None:
                setattr(st, name, value)
