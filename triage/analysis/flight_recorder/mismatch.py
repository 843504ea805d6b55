"""The first collective the ranks of a process group disagree on: op, sizes or dtypes."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from operator import attrgetter, ne, or_
from typing import Any, Literal

from triage.analysis.flight_recorder.records import RankPGState, SeqRows, op_of, record_ref
from triage.model import CollectiveMismatch, FlightRecorderEntry

__all__ = ["first_mismatch"]

# ops whose per-rank sizes legitimately differ (uneven splits), so only op and dtype are compared
_UNEVEN_OPS = {"all_to_all", "all_to_all_single", "alltoall", "alltoall_base", "gather", "scatter"}
# what two ranks' records of one collective must agree on
_COMPARED = ("profiling_name", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes")


def _signature(entries: list[FlightRecorderEntry]) -> tuple[Any, ...]:
    sig = []
    for e in entries:
        op = op_of(e.profiling_name)
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
    op = op_of(a.profiling_name)
    if op != op_of(b.profiling_name):
        return False
    if op in _UNEVEN_OPS:
        return True
    return a.input_sizes == b.input_sizes and a.output_sizes == b.output_sizes


def first_mismatch(pg: str, states: dict[int, RankPGState]) -> CollectiveMismatch | None:
    holders = [s for s in states.values() if s.by_seq]
    if len(holders) < 2:
        return None
    # compare only where every rank still holds records: buffers wrap at different points
    start = max(s.first_seq for s in holders if s.first_seq is not None)
    ref = max(holders, key=lambda s: len(s.by_seq))
    ref_seqs = ref.by_seq
    ref_ids = ref_seqs.seq_ids()
    first: int | None = None
    for s in holders:
        if s is ref:
            continue
        if _agree(ref, ref_ids, s, start):
            continue  # the common case: identical records over the shared window, checked in C
        # a field-by-field screen over all records, then the exact check on the few hits
        hits = _differing(ref_seqs, s.by_seq)
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
    per_rank = {
        r: record_ref(e, pg) for r, s in states.items() if (e := s.by_seq.get(first)) is not None
    }
    return CollectiveMismatch(
        process_group=pg,
        seq=first,
        kind=kind,
        ranks=tuple(odd),
        tie=not clear,
        pattern="differing" if kind != "op" else "left_loop" if departed else "diverged",
        departed=tuple(departed or ()),
        per_rank=per_rank,
    )


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


_FINGERPRINT = attrgetter(*_COMPARED)


def _agree(ref: RankPGState, ref_ids: list[int], other: RankPGState, start: int) -> bool:
    """True when both ranks hold the same records (sequence ids, op names, sizes, dtypes, in
    order, coalesced ones too) over the ids they share from `start`, compared column by
    column; False also when it cannot be told that way (ids out of order)."""
    a, b = ref.by_seq, other.by_seq
    if not (a.ordered and b.ordered):
        return False
    other_ids = b.seq_ids()
    lo = max(start, ref_ids[0], other_ids[0])
    hi = min(ref_ids[-1], other_ids[-1])
    if hi < lo:
        return True
    a_lo, a_hi = bisect_left(ref_ids, lo), bisect_right(ref_ids, hi)
    b_lo, b_hi = bisect_left(other_ids, lo), bisect_right(other_ids, hi)
    if ref_ids[a_lo:a_hi] != other_ids[b_lo:b_hi]:
        return False
    rows_a, rows_b = a.rows[a_lo:a_hi], b.rows[b_lo:b_hi]
    return all(a.table.equal_field(name, rows_a, b.table, rows_b) for name in _COMPARED)


def _differing(a: SeqRows, b: SeqRows) -> list[int]:
    """The sequence ids both hold whose records differ in op name, sizes or dtypes, read a
    field at a time."""
    seqs: list[int] = []
    rows_a: list[int] = []
    rows_b: list[int] = []
    for seq in b:
        at = a.place(seq)
        if at is not None:
            seqs.append(seq)
            rows_a.append(a.rows[at])
            rows_b.append(b.rows[b.place(seq)])  # type: ignore[index]
    differs = [False] * len(seqs)
    for name in _COMPARED:
        pairs = map(ne, a.table.field(name, rows_a), b.table.field(name, rows_b))
        differs = list(map(or_, differs, pairs))
    return [seq for seq, odd in zip(seqs, differs, strict=True) if odd]


def _mismatch_kind(sigs: list[tuple[Any, ...]]) -> Literal["op", "size", "dtype"]:
    ops = {tuple(x[0] for x in s) for s in sigs}
    if len(ops) > 1:
        return "op"
    dtypes = {tuple(tuple(x[-2]) + tuple(x[-1]) for x in s) for s in sigs}
    if len(dtypes) > 1:
        return "dtype"
    return "size"
