"""Reading only the last entries of a flight-recorder dump (what a 1,024-rank job can afford)
gives exactly the entries and header a whole read gives, or falls back to the whole read."""

from __future__ import annotations

import io
import pickle
import random
from pathlib import Path
from typing import Any

import pytest
from fr_samples import fr_entry
from hypothesis import given, settings
from hypothesis import strategies as st

from triage import pipeline
from triage.model import EventKind, Source, SourceKind
from triage.parsers import flight_recorder
from triage.parsers.flight_recorder import pickle_memo

SAMPLES = Path(__file__).resolve().parent.parent / "corpus_samples"
# Dumps written by torch's own pickler (real torchrun gloo jobs), not by Python's.
REAL_DUMPS = sorted(
    p
    for p in SAMPLES.glob("*/bundle/**/*")
    if p.is_file() and p.read_bytes()[:2] == b"\x80\x02" and b"entries" in p.read_bytes()[:4096]
)

_FILES = ["torch/distributed/distributed_c10d.py", "/work/train.py", "/work/model/ünï.py"]


def _entry(seq: int, pg: str, rng: random.Random) -> dict[str, Any]:
    """An entry of group `pg` with a random op, shape, state and stack (repeated strings)."""
    size = rng.choice([[4096], [1024, 4096], [7]])
    return fr_entry(
        seq,
        frames=[
            {"name": rng.choice(["all_reduce", "step", "forward"]), "filename": f, "line": i}
            for i, f in enumerate(rng.sample(_FILES, rng.randint(0, 3)))
        ],
        record_id=seq,
        pg_id=int(pg),
        process_group=tuple([pg, "default_pg" if pg == "0" else f"group_{pg}"]),
        profiling_name=rng.choice(["nccl:all_reduce", "nccl:broadcast", "nccl:_allgather_base"]),
        time_created_ns=1796000000000000000 + seq * 10**6,
        input_sizes=[list(size)],
        input_dtypes=[rng.choice(["Float", "BFloat16"])],
        output_sizes=[list(size)],
        output_dtypes=["Float"],
        state=rng.choice(["completed", "started", "scheduled"]),
        time_discovered_started_ns=None,
        time_discovered_completed_ns=None,
        retired=rng.random() < 0.5,
    )


def _dump(entries: int, pgs: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    return {
        "version": "2.10",
        "pg_config": {str(p): {"name": str(p), "desc": "x", "ranks": "[0, 1]"} for p in range(pgs)},
        "comm_lib_version": "2.21.5",
        "pg_status": {
            "0": {
                "last_enqueued_collective": entries,
                "last_started_collective": -1,
                "last_completed_collective": entries - 1,
            }
        },
        "entries": [_entry(i + 1, str(rng.randrange(pgs)), rng) for i in range(entries)],
    }


def _read(data: bytes, tail: int | None) -> Any:
    dump, why = flight_recorder.load_dump(data, tail=tail)
    assert dump is not None, why
    return dump


@pytest.mark.parametrize("path", REAL_DUMPS, ids=lambda p: f"{p.parent.parent.parent.name}")
@pytest.mark.parametrize("keep", [1, 3, 10])
def test_the_tail_of_a_real_torch_dump_is_the_end_of_its_whole_read(path: Path, keep: int) -> None:
    data = path.read_bytes()
    whole = _read(data, None)
    part = _read(data, keep)
    if len(whole.entries) <= keep:
        assert part == whole
        return
    assert part.entries == whole.entries[-keep:]
    assert part.entries_total == len(whole.entries)
    assert (part.version, part.pg_status, part.comm_lib_version) == (
        whole.version,
        whole.pg_status,
        whole.comm_lib_version,
    )
    # groups only older entries name (gloo's pg_config lacks them) are not known to the tail
    assert part.pg_desc.items() <= whole.pg_desc.items()
    assert part.pg_config.items() <= whole.pg_config.items()


def test_real_dumps_are_there_to_check() -> None:
    assert len(REAL_DUMPS) >= 10


@settings(max_examples=40, deadline=None)
@given(
    entries=st.integers(min_value=2, max_value=700),
    pgs=st.integers(min_value=1, max_value=3),
    keep=st.integers(min_value=1, max_value=400),
    seed=st.integers(min_value=0, max_value=10**6),
)
def test_the_tail_is_the_end_of_the_whole_read_across_memo_widths(
    entries: int, pgs: int, keep: int, seed: int
) -> None:
    # Past ~250 memo slots the writer switches from BINPUT to LONG_BINPUT: both are cut.
    data = pickle.dumps(_dump(entries, pgs, seed), protocol=2)
    whole = _read(data, None)
    part = _read(data, keep)
    if entries <= keep:
        assert part == whole
    else:
        assert part.entries == whole.entries[-keep:]
        assert part.entries_total == entries
        assert part.pg_status == whole.pg_status and part.pg_config == whole.pg_config


def test_a_dump_the_cut_cannot_read_still_gives_its_last_entries() -> None:
    dump = _dump(50, 1, 3)
    shared = ("0", "default_pg")  # one tuple in every entry: later entries point back at it
    for entry in dump["entries"]:
        entry["process_group"] = shared
    for data in (
        pickle.dumps(dump, protocol=4),  # implicit memo numbering: not cut, decoded whole
        pickle.dumps(dump, protocol=2),  # a tuple shared by memo: not cut, decoded whole
    ):
        part = _read(data, 5)
        assert part.entries_total == 50
        assert part.entries == _read(data, None).entries[-5:]


def test_a_forbidden_opcode_in_the_kept_tail_is_still_refused() -> None:
    data = pickle.dumps(_dump(40, 1, 5), protocol=2)
    assert data.endswith(b"eu.")  # APPENDS (entries), SETITEMS (top dict), STOP
    # os.system('id') spliced in after the last entry, inside the part a tail read loads
    spliced = data[:-3] + b"cos\nsystem\n(X\x02\x00\x00\x00idtR0" + data[-3:]
    dump, why = flight_recorder.load_dump(spliced, tail=5)
    assert dump is None
    assert why is not None and "refused" in why


def test_a_memo_bomb_in_the_kept_tail_is_refused() -> None:
    data = pickle.dumps(_dump(40, 1, 7), protocol=2)
    assert data.endswith(b"eu.")
    bomb = data[:-3] + b"Nr\x00\x00\x00\x400" + data[-3:]  # LONG_BINPUT slot 2**30
    dump, why = flight_recorder.load_dump(bomb, tail=5)
    assert dump is None
    assert why is not None and "memo slot" in why


def test_memo_strings_finds_only_strings_and_survives_lookalike_payload() -> None:
    # payload bytes that look like the PUT of slot 1 come before the real one
    data = pickle.dumps(["xq\x01y", "name", ["list"], "name"], protocol=2)
    found = pickle_memo.memo_strings(data, {0, 1, 2, 3, 4, 200}, len(data))
    assert found == {1: "xq\x01y", 2: "name", 4: "list"}  # slots 0 and 3 hold lists


def _source(path: Path) -> Source:
    data = path.read_bytes()
    return Source(
        path=str(path),
        kind=SourceKind.FLIGHT_RECORDER,
        size=len(data),
        open=lambda: io.BytesIO(data),
        rank=0,
    )


BIG_ENTRIES = 30_000  # x 3 ranks: ~17 MB of dumps, more than a job reads whole


@pytest.fixture(scope="module")
def big_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("big_job")
    for rank in range(3):
        (folder / f"nccl_trace_rank_{rank}").write_bytes(
            pickle.dumps(_dump(BIG_ENTRIES, 1, rank), protocol=2)
        )
    return folder


def test_a_big_job_reads_the_tail_and_says_so(tmp_path: Path, big_job: Path) -> None:
    for rank in range(3):
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(
            pickle.dumps(_dump(300, 1, rank), protocol=2)
        )
    assert pipeline.fr_tail_for([_source(p) for p in tmp_path.iterdir()]) is None
    tail = pipeline.fr_tail_for([_source(p) for p in big_job.iterdir()])
    assert tail is not None
    parsed = pipeline.read_inputs([str(big_job)])
    events = [e for p in parsed for e in p.events if e.kind is EventKind.FLIGHT_RECORDER]
    assert len(events) == 3
    for event in events:
        assert len(event.payload.entries) == tail
        assert event.payload.entries_total == BIG_ENTRIES
        assert f"{BIG_ENTRIES} entries (last {tail} read)" in event.text


def _job_dump(rank: int, behind: bool) -> bytes:
    """A rank of a 4-rank job: group 1 ran 5 collectives, then group 0 ran 50 (49 on the rank
    that is behind). The pickle is laid out as torch writes it."""
    del rank  # every rank runs the same program: the same collectives
    pg1 = [_entry(seq, "1", random.Random(seq)) for seq in range(1, 6)]
    pg0 = [_entry(seq, "0", random.Random(-seq)) for seq in range(1, 50 if behind else 51)]
    records = [*pg0[:-4], *pg1, *pg0[-4:]] if behind else [*pg0[:-5], *pg1, *pg0[-5:]]
    for i, record in enumerate(records):
        record["record_id"] = i
        record["state"] = "completed"
    records[-1]["state"] = "scheduled"
    last0 = len(pg0)
    return pickle.dumps(
        {
            "version": "2.10",
            "pg_config": {
                "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
                "1": {"name": "1", "desc": "group_1", "ranks": "[0, 1, 2, 3]"},
            },
            "pg_status": {
                "0": {
                    "last_enqueued_collective": last0,
                    "last_started_collective": last0 - 1,
                    "last_completed_collective": last0 - 1,
                },
                "1": {
                    "last_enqueued_collective": 5,
                    "last_started_collective": 5,
                    "last_completed_collective": 5,
                },
            },
            "entries": records,
        },
        protocol=2,
    )


def test_groups_outside_the_kept_entries_are_judged_by_pg_status_not_as_never_entered(
    tmp_path: Path,
) -> None:
    # With 5 entries kept, the rank that is behind still holds group 1's last collective and
    # the others do not: read as "never entered group 1", the healthy ranks would be blamed.
    for rank in range(4):
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(_job_dump(rank, behind=rank == 2))
    parsed = pipeline.read_inputs([str(tmp_path)], fr_entries=5)
    dumps = [e.payload for p in parsed for e in p.events if e.kind is EventKind.FLIGHT_RECORDER]
    assert {d.entries_total for d in dumps} == {54, 55}
    assert {len(d.entries) for d in dumps} == {5}

    from triage.analysis import correlate

    analysis = correlate(parsed)
    assert analysis.culprit_ranks == (2,)
    kinds = {(f.kind, f.ranks) for f in analysis.findings}
    assert ("lagging_rank", (2,)) in kinds
    assert not [f.summary for f in analysis.findings if "group_1" in f.summary]
    assert not [f.summary for f in analysis.findings if f.kind == "missing_rank"]


def test_the_user_can_ask_for_every_entry_or_for_a_window_of_their_own(
    tmp_path: Path, big_job: Path
) -> None:
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(_dump(300, 1, 0), protocol=2))

    def held(folder: Path = tmp_path, **kwargs: Any) -> set[tuple[int, int | None]]:
        parsed = pipeline.read_inputs([str(folder)], **kwargs)
        return {
            (len(e.payload.entries), e.payload.entries_total)
            for p in parsed
            for e in p.events
            if e.kind is EventKind.FLIGHT_RECORDER
        }

    assert held() == {(300, None)}  # a small job: read whole
    assert held(fr_entries=7) == {(7, 300)}
    tail = pipeline.fr_tail_for([_source(p) for p in big_job.iterdir()])
    assert held(big_job) == {(tail, BIG_ENTRIES)}  # a big job: its tail
    assert held(big_job, fr_entries=0) == {(BIG_ENTRIES, None)}


_CLEAN = pickle.dumps(_dump(60, 2, 11), protocol=2)


@settings(max_examples=200, deadline=None)
@given(
    edits=st.lists(
        st.tuples(st.integers(min_value=0, max_value=len(_CLEAN) - 1), st.integers(0, 255)),
        min_size=1,
        max_size=6,
    ),
    cut=st.integers(min_value=1, max_value=len(_CLEAN)),
)
def test_a_damaged_dump_read_in_part_never_raises(edits: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(_CLEAN[:cut])
    for at, value in edits:
        if at < len(data):
            data[at] = value
    dump, why = flight_recorder.load_dump(bytes(data), tail=5)
    assert (dump is None) != (why is None)
    if dump is not None and dump.entries_total is not None:
        assert len(dump.entries) <= 5


def _u(text: bytes) -> bytes:
    return b"X" + len(text).to_bytes(4, "little") + text


def _put(slot: int) -> bytes:
    return b"r" + slot.to_bytes(4, "little")


def _get(slot: int) -> bytes:
    return b"j" + slot.to_bytes(4, "little")


def _stalling_dump(pad: int, refs: int, entries: int = 300) -> bytes:
    """A dump laid out for the tail read whose kept entries each name `refs` memo slots
    holding lists, defined at its start behind `pad` bytes: each such slot used to cost a
    search of the whole dump."""
    lists, keys, first_entry = 1_000, 2_000_000, 3_000_000
    head = b"\x80\x02}(" + _u(b"version") + _u(b"2.10") + _u(b"pg_config") + b"}"
    head += _u(b"junk") + b"](" + b"".join(b"]" + _put(lists + i) for i in range(refs)) + b"e"
    head += _u(b"pad") + _u(b"a" * pad)
    body = [_u(b"entries") + _put(10) + b"]" + _put(11) + b"("]
    for i in range(entries):
        body.append(b"}" + _put(first_entry + i) + b"(")
        if i == 0:
            body.append(_u(b"profiling_name") + _put(keys) + _u(b"nccl:all_reduce"))
            body.append(_put(keys + 1) + _u(b"collective_seq_id") + _put(keys + 2))
        else:
            body.append(_get(keys) + _get(keys + 1) + _get(keys + 2))
        body.append(b"J" + (i + 1).to_bytes(4, "little"))
        if i >= entries - 128:
            body.append(b"".join(_get(lists + j) + b"0" for j in range(refs)))
        body.append(b"u")
    return head + b"".join(body) + b"eu."


@pytest.mark.timeout(10)
def test_a_dump_crafted_to_stall_the_tail_read_is_read_whole_instead() -> None:
    # 8 MB, 128 kept entries naming 4,000 list slots each: ~20 s of searching before the
    # searches were bounded; the whole read takes a tenth of a second (and keeps the tail).
    data = _stalling_dump(8_000_000, 4_000)
    whole = _read(data, None)
    part = _read(data, 128)
    assert part.entries == whole.entries[-128:] and len(whole.entries) == 300
    assert part.entries_total == 300


def test_memo_string_searches_stop_at_their_budget() -> None:
    data = _stalling_dump(100_000, 50)
    wanted = set(range(1_000, 1_050))
    with pytest.raises(pickle_memo.SearchBudgetSpent):
        pickle_memo.memo_strings(data, wanted, len(data) - 10, budget=len(data))
    with pytest.raises(pickle_memo.SearchBudgetSpent):
        pickle_memo.memo_strings(data, set(range(10_000)), len(data))
