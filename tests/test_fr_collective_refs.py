"""The flight-recorder analysis names collectives by typed references: the stuck one, and the
first one the ranks recorded differently, with each rank's record of it."""

from __future__ import annotations

import json
from collections.abc import Sequence

from triage import knowledge
from triage.analysis import flight_recorder
from triage.model import (
    CollectiveMismatch,
    CollectiveRef,
    Event,
    EventKind,
    FlightRecorderDump,
    FlightRecorderEntry,
    Level,
    StackFrame,
)


def _entry(
    seq: int,
    *,
    op: str = "all_reduce",
    sizes: tuple[tuple[int, ...], ...] = ((1024,),),
    dtype: str = "Float",
    frames: tuple[StackFrame, ...] = (),
) -> FlightRecorderEntry:
    return FlightRecorderEntry(
        record_id=seq,
        pg_name="0",
        pg_desc="default_pg",
        collective_seq_id=seq,
        p2p_seq_id=0,
        op_id=seq,
        is_p2p=False,
        profiling_name=f"nccl:{op}",
        input_sizes=sizes,
        output_sizes=sizes,
        input_dtypes=(dtype,),
        output_dtypes=(dtype,),
        state="scheduled",
        time_created_ns=None,
        time_started_ns=None,
        time_completed_ns=None,
        duration_ms=None,
        timeout_ms=600000,
        retired=False,
        frames=frames,
    )


def _dump(rank: int, entries: Sequence[FlightRecorderEntry]) -> flight_recorder.FRDump:
    dump = FlightRecorderDump(
        rank=rank,
        version="2.10",
        pg_config={"0": (0, 1, 2, 3)},
        pg_desc={"0": "default_pg"},
        pg_status={},
        comm_lib_version=None,
        entries=tuple(entries),
    )
    path = f"fr/nccl_trace_rank_{rank}"
    event = Event(source=path, kind=EventKind.FLIGHT_RECORDER, text="", rank=rank, level=Level.INFO)
    return flight_recorder.FRDump(rank, dump, event)


def test_the_first_size_mismatch_is_a_typed_record_of_every_rank() -> None:
    dumps = [
        _dump(r, [*map(_entry, range(1, 8)), _entry(8, sizes=((7,),) if r == 1 else ((1024,),))])
        for r in range(4)
    ]
    fr = flight_recorder.analyze(dumps, knowledge.shipped().frames)
    report = fr.hang_pg
    assert report is not None
    m = report.mismatch
    assert isinstance(m, CollectiveMismatch)
    assert (m.process_group, m.seq, m.kind, m.ranks, m.tie, m.pattern) == (
        "0",
        8,
        "size",
        (1,),
        False,
        "differing",
    )
    assert set(m.per_rank) == {0, 1, 2, 3}
    odd = m.per_rank[1]
    assert (odd.op, odd.seq, odd.input_sizes, odd.input_dtypes) == (
        "all_reduce",
        8,
        ((7,),),
        ("Float",),
    )
    assert m.per_rank[0].input_sizes == ((1024,),) and m.per_rank[0].timeout_ms == 600000


def test_a_rank_that_left_the_loop_is_named_as_departed() -> None:
    # ranks 0-2 issue the all_reduce they had been repeating once more; rank 3 moved on
    dumps = [
        _dump(r, [*map(_entry, range(1, 10)), _entry(10, op="barrier" if r == 3 else "all_reduce")])
        for r in range(4)
    ]
    m = flight_recorder.analyze(dumps, knowledge.shipped().frames).hang_pg
    assert m is not None and m.mismatch is not None
    assert (m.mismatch.kind, m.mismatch.pattern, m.mismatch.ranks) == ("op", "left_loop", (3,))
    assert m.mismatch.departed == (3,)


def test_the_stuck_collective_carries_its_call_site_and_renders_as_the_json_always_did() -> None:
    frames = (
        StackFrame("all_reduce", "/usr/lib/python3/site-packages/torch/distributed/c10d.py", 9),
        StackFrame("sync_metrics", "/workspace/train.py", 88),
    )
    dumps = [
        _dump(r, [_entry(s, frames=frames) for s in range(1, 43 if r != 3 else 42)])
        for r in range(4)
    ]
    fr = flight_recorder.analyze(dumps, knowledge.shipped().frames)
    assert fr.hang_pg is not None
    ref = flight_recorder.collective_of(fr.hang_pg)
    assert (ref.op, ref.seq, ref.process_group) == ("all_reduce", 42, "0")
    assert ref.call_site == "sync_metrics (/workspace/train.py:88)"
    assert json.loads(json.dumps(ref.as_dict())) == {
        "op": "all_reduce",
        "profiling_name": "nccl:all_reduce",
        "input_sizes": [[1024]],
        "output_sizes": [[1024]],
        "dtypes": ["Float"],
        "timeout_ms": 600000,
        "call_site": "sync_metrics (/workspace/train.py:88)",
        "seq": 42,
    }


def test_a_record_fills_in_what_a_watchdog_line_said_and_overrides_its_op() -> None:
    said = CollectiveRef(op="allreduce", seq=42, numel_in=1024)
    record = CollectiveRef(op="all_reduce", seq=42, profiling_name="nccl:all_reduce")
    both = said.merged(record)
    assert (both.op, both.seq, both.numel_in, both.profiling_name) == (
        "all_reduce",
        42,
        1024,
        "nccl:all_reduce",
    )
    # a watchdog line alone: no sizes or dtypes are claimed
    assert said.as_dict() == {"op": "allreduce", "numel_in": 1024, "seq": 42}
