"""What the flight-recorder analysis holds: dumps, one rank's view of a process group, a
group's report and the analysis of a whole job."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from triage.model import (
    CollectiveMismatch,
    CollectiveRef,
    EntryTable,
    Event,
    Finding,
    FlightRecorderDump,
    FlightRecorderEntry,
)

__all__ = [
    "FRAnalysis",
    "FRDump",
    "PGReport",
    "RankPGState",
    "SeqRows",
    "op_of",
    "record_ref",
]


@dataclass(frozen=True)
class FRDump:
    rank: int
    dump: FlightRecorderDump
    event: Event
    attempt: int | None = None  # elastic restart attempt, from the dump's folder


class SeqRows(Mapping[int, FlightRecorderEntry]):
    """One rank's records of one process group, keyed by collective sequence id (the first
    record of each), held as rows of the dump's EntryTable: an entry is built only when
    asked for, so a whole 2,000-entry ring buffer costs a few numbers, not 2,000 objects.

    `rows`: the group's rows of the table in ring-buffer order; `seqs`: their sequence ids.
    """

    __slots__ = ("_first", "_keys", "_more", "_places", "_pos", "rows", "table")

    def __init__(self, table: EntryTable, rows: Sequence[int], seqs: list[int]) -> None:
        self.table = table
        self.rows: Sequence[int] = rows if isinstance(rows, range) else array("I", rows)
        self._first = seqs[0] if seqs else 0
        # a gap-free run (the usual ring buffer): place = seq - first, nothing stored
        self._keys: array | None = None
        self._places: array | None = None
        self._pos: dict[int, int] | None = None
        self._more: dict[int, list[int]] = {}
        if seqs == list(range(self._first, self._first + len(seqs))):
            return
        if all(a <= b for a, b in zip(seqs, seqs[1:], strict=False)):
            # gaps or coalesced ops (a repeated id's records are neighbours): each id once,
            # with the place of its first record; its last is before the next id's first
            firsts = dict(zip(reversed(seqs), range(len(seqs) - 1, -1, -1), strict=True))
            keys = sorted(firsts)
            try:
                self._keys = array("q", keys)
                self._places = array("I", map(firsts.__getitem__, keys))
                return
            except OverflowError:  # ids past 64 bits: kept as a dict below
                self._keys = None
        # ids out of order (an odd dump): each id's first place, and the others apart
        self._pos = {}
        for place, seq in enumerate(seqs):
            if seq in self._pos:
                self._more.setdefault(seq, []).append(place)
            else:
                self._pos[seq] = place

    @classmethod
    def empty(cls) -> SeqRows:
        return cls(EntryTable.of(()), range(0), [])

    @property
    def ordered(self) -> bool:
        """True when the sequence ids never go down from one record to the next."""
        return self._pos is None

    def seq_ids(self) -> list[int]:
        """The sequence id of every record, in ring-buffer order (coalesced ones repeat)."""
        return self.table.field("collective_seq_id", self.rows)

    def place(self, seq: int) -> int | None:
        """Where the first record of `seq` is among `rows`, or None."""
        if self._pos is not None:
            return self._pos.get(seq)
        if self._keys is None:
            at = seq - self._first
            return at if 0 <= at < len(self.rows) else None
        i = bisect_left(self._keys, seq)
        if i < len(self._keys) and self._keys[i] == seq:
            return self._places[i]  # type: ignore[index]
        return None

    def records(self, seq: int) -> list[FlightRecorderEntry]:
        """Every record of `seq` (coalesced ops share one id), in ring-buffer order."""
        at = self.place(seq)
        if at is None:
            return []
        places: Sequence[int] = [at, *self._more.get(seq, ())]
        if self._keys is not None and self._places is not None:
            i = bisect_left(self._keys, seq)
            end = self._places[i + 1] if i + 1 < len(self._places) else len(self.rows)
            places = range(at, end)
        return [self.table[self.rows[p]] for p in places]

    def repeated(self) -> list[int]:
        """The ids held by more than one record (coalesced ops)."""
        if self._keys is None or self._places is None:
            return list(self._more)
        ends = [*self._places[1:], len(self.rows)]
        return [k for k, a, b in zip(self._keys, self._places, ends, strict=True) if b - a > 1]

    def value(self, seq: int, name: str) -> Any:
        """One field of the record of `seq` (KeyError when there is none)."""
        at = self.place(seq)
        if at is None:
            raise KeyError(seq)
        return self.table.value(self.rows[at], name)

    def __getitem__(self, seq: int) -> FlightRecorderEntry:
        at = self.place(seq)
        if at is None:
            raise KeyError(seq)
        return self.table[self.rows[at]]

    def __contains__(self, seq: object) -> bool:
        return type(seq) is int and self.place(seq) is not None

    def __iter__(self) -> Iterator[int]:
        if self._pos is not None:
            return iter(sorted(self._pos))
        if self._keys is not None:
            return iter(self._keys)
        return iter(range(self._first, self._first + len(self.rows)))

    def __len__(self) -> int:
        if self._pos is not None:
            return len(self._pos)
        return len(self._keys) if self._keys is not None else len(self.rows)


@dataclass
class RankPGState:
    """One rank's view of one process group: its records keyed by collective sequence id."""

    rank: int
    by_seq: SeqRows = field(default_factory=SeqRows.empty)  # the first record of each id
    first_seq: int | None = None
    last_enqueued: int | None = None
    last_started: int | None = None
    last_completed: int | None = None

    @property
    def coalesced(self) -> list[int]:
        """The ids of coalesced ops: more than one record each."""
        return self.by_seq.repeated()

    def entries_at(self, seq: int) -> list[FlightRecorderEntry]:
        return self.by_seq.records(seq)


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
    mismatch: CollectiveMismatch | None = None
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


def op_of(profiling_name: str) -> str:
    """`nccl:send 0->1` -> `send`; memoised because a dump repeats a handful of names."""
    op = _OP_CACHE.get(profiling_name)
    if op is None:
        op = profiling_name.split(":", 1)[-1].split(" ", 1)[0]
        if len(_OP_CACHE) < 4096:
            _OP_CACHE[profiling_name] = op
    return op


def record_ref(e: FlightRecorderEntry, pg: str, call_site: str | None = None) -> CollectiveRef:
    """A rank's record of a collective as the typed reference later stages read."""
    return CollectiveRef(
        op=op_of(e.profiling_name),
        seq=e.collective_seq_id,
        process_group=pg,
        profiling_name=e.profiling_name,
        input_sizes=e.input_sizes,
        output_sizes=e.output_sizes,
        input_dtypes=e.input_dtypes,
        output_dtypes=e.output_dtypes,
        timeout_ms=e.timeout_ms,
        state=e.state,
        call_site=call_site,
    )
