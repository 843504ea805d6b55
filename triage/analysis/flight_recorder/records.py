"""What the flight-recorder analysis holds: dumps, one rank's view of a process group, a
group's report and the analysis of a whole job."""

from __future__ import annotations

from dataclasses import dataclass, field

from triage.model import (
    CollectiveMismatch,
    CollectiveRef,
    Event,
    Finding,
    FlightRecorderDump,
    FlightRecorderEntry,
)

__all__ = ["FRAnalysis", "FRDump", "PGReport", "RankPGState", "op_of", "record_ref"]


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
