"""Structured inputs: flight-recorder dumps, py-spy dumps, error.json, environment reports.

Fixtures under tests/fixtures/structured/ are real where the machine could make them (gloo FR
dumps, py-spy of a hung 2-rank job, torchrun error files, collect_env, pip) and hand-written in
the documented shapes elsewhere (older FR eras, NCCL states, ds_report, nvidia-smi).
"""

from __future__ import annotations

import ast
import gc
import io
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from fr_samples import fr_entry
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triage.model import (
    EnvReport,
    EventKind,
    FlightRecorderDump,
    ParsedSource,
    PySpyDump,
    RankExit,
    Source,
    SourceKind,
)
from triage.parsers import elastic_error, env_report, flight_recorder, pyspy
from triage.parsers.common import PARSER_STOPPED
from triage.parsers.flight_recorder import safe_pickle

FIXTURES = Path(__file__).parent / "fixtures" / "structured"
FR = FIXTURES / "fr_gloo"
PYSPY = FIXTURES / "pyspy"
ELASTIC = FIXTURES / "elastic"
ENV = FIXTURES / "env"

PARSERS = {
    SourceKind.FLIGHT_RECORDER: flight_recorder.parse,
    SourceKind.PYSPY: pyspy.parse,
    SourceKind.ELASTIC_ERROR: elastic_error.parse,
    SourceKind.ENV_REPORT: env_report.parse,
}


def source(
    data: bytes,
    kind: SourceKind = SourceKind.FLIGHT_RECORDER,
    rank: int | None = 3,
    path: str = "dump/rank_3",
    local_rank: int | None = None,
) -> Source:
    return Source(
        path=path,
        kind=kind,
        size=len(data),
        open=lambda: io.BytesIO(data),
        rank=rank,
        local_rank=local_rank,
    )


def parse_file(path: Path, kind: SourceKind, rank: int | None = 3, **kw: Any) -> ParsedSource:
    data = path.read_bytes()
    return PARSERS[kind](source(data, kind, rank=rank, path=str(path), **kw))


def only(parsed: ParsedSource, kind: EventKind) -> list[Any]:
    return [e for e in parsed.events if e.kind is kind]


def fr_dump(parsed: ParsedSource) -> FlightRecorderDump:
    (event,) = only(parsed, EventKind.FLIGHT_RECORDER)
    assert isinstance(event.payload, FlightRecorderDump)
    return event.payload


# =========================================================================== safe_pickle


class _RunsShell:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.target}",))


@pytest.mark.parametrize("protocol", range(0, pickle.HIGHEST_PROTOCOL + 1))
def test_a_dump_that_would_run_a_shell_command_runs_nothing_and_says_why(
    tmp_path: Path, protocol: int
) -> None:
    target = tmp_path / "pwned"
    evil = pickle.dumps({"version": "2.10", "entries": [_RunsShell(target)]}, protocol=protocol)

    parsed = flight_recorder.parse(source(evil))

    assert not target.exists()
    (warning,) = only(parsed, EventKind.INPUT_WARNING)
    assert "refused" in warning.text
    assert "GLOBAL" in warning.text  # names the opcode that would have imported os.system
    assert parsed.warnings == (warning.text,)
    assert not only(parsed, EventKind.FLIGHT_RECORDER)


def test_a_builtins_exec_global_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    target = tmp_path / "created-by-exec"
    code = f"open({str(target)!r}, 'w').close()"
    evil = b"cbuiltins\nexec\n(V" + code.encode() + b"\ntR."

    with pytest.raises(safe_pickle.PickleRefused, match="GLOBAL.*imports a global"):
        safe_pickle.loads(evil)
    parsed = flight_recorder.parse(source(evil))

    assert not target.exists()
    assert "refused" in parsed.warnings[0]


# One hand-assembled pickle per way of importing or calling: each must be refused by name.
_FORBIDDEN_PICKLES = {
    "STACK_GLOBAL": b"\x80\x04\x8c\x08builtins\x8c\x04exec\x93\x8c\x01x\x85R.",
    "INST": b"(S'x'\nibuiltins\nexec\n.",
    "OBJ": b"(]o.",
    "NEWOBJ": b"\x80\x02])\x81.",
    "NEWOBJ_EX": b"\x80\x04])}\x92.",
    "REDUCE": b"\x80\x02]]R.",
    "BUILD": b"\x80\x02}}b.",
    "EXT1": b"\x80\x02\x82\x01.",
    "EXT2": b"\x80\x02\x83\x01\x00.",
    "EXT4": b"\x80\x02\x84\x01\x00\x00\x00.",
    "PERSID": b"Pabc\n.",
    "BINPERSID": b"\x80\x02X\x01\x00\x00\x00xQ.",
    "EMPTY_SET": b"\x80\x04\x8f.",
    "BYTEARRAY8": b"\x80\x05\x96\x00\x00\x00\x00\x00\x00\x00\x00.",
    "NEXT_BUFFER": b"\x80\x05\x97.",
}


@pytest.mark.parametrize("opcode", sorted(_FORBIDDEN_PICKLES))
def test_every_opcode_that_imports_or_calls_is_refused_by_name(opcode: str) -> None:
    with pytest.raises(safe_pickle.PickleRefused, match=opcode):
        safe_pickle.loads(_FORBIDDEN_PICKLES[opcode])


def test_find_class_refuses_even_if_an_opcode_slipped_past_the_scan() -> None:
    unpickler = safe_pickle._DataOnlyUnpickler(io.BytesIO(b"cos\nsystem\n."))
    with pytest.raises(safe_pickle.PickleRefused, match="os.system"):
        unpickler.load()


def test_a_ten_byte_memo_bomb_is_refused_without_allocating() -> None:
    # LONG_BINPUT 1,000,000,000 would make CPython zero-fill a 16 GB memo table.
    bomb = b"\x80\x02]r\x00\xca\x9a\x3b."
    with pytest.raises(safe_pickle.PickleRefused, match="memo slot 1000000000"):
        safe_pickle.loads(bomb)  # at once: bench/guard_timings.py times it
    with pytest.raises(safe_pickle.PickleRefused, match="memo slot"):
        safe_pickle.loads(b"]p99999999999\n.")


def test_size_item_depth_and_integer_limits_are_enforced() -> None:
    data = pickle.dumps(list(range(1000)), protocol=2)
    with pytest.raises(safe_pickle.PickleRefused, match="over the 100-byte limit"):
        safe_pickle.loads(data, safe_pickle.Limits(max_bytes=100))
    with pytest.raises(safe_pickle.PickleRefused, match="objects"):
        safe_pickle.loads(data, safe_pickle.Limits(max_items=50))
    deep: Any = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(safe_pickle.PickleRefused, match="deeper than 64"):
        safe_pickle.loads(pickle.dumps(deep, protocol=2))
    # Shared references: every node is one level below the root, yet the longest path is 102.
    chain: list[list[Any]] = [[] for _ in range(101)]
    for outer, inner in zip(chain, chain[1:], strict=False):
        outer.append(inner)
    with pytest.raises(safe_pickle.PickleRefused, match="deeper than 64"):
        safe_pickle.loads(pickle.dumps(list(chain), protocol=2))
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(safe_pickle.PickleRefused, match="cycle"):
        safe_pickle.loads(pickle.dumps(loop, protocol=2))
    with pytest.raises(safe_pickle.PickleRefused, match="integer of"):
        safe_pickle.loads(pickle.dumps(1 << 4000, protocol=2))
    with pytest.raises(safe_pickle.PickleRefused, match="over the 10-byte limit"):
        safe_pickle.load(io.BytesIO(data), safe_pickle.Limits(max_bytes=10))


def test_truncated_pickles_fail_with_a_clear_error_at_every_cut() -> None:
    data = (FR / "type" / "rank_0").read_bytes()
    for cut in range(len(data)):
        with pytest.raises(safe_pickle.PickleError, match="truncated|corrupt|malformed"):
            safe_pickle.loads(data[:cut])


_plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda children: (
        st.lists(children, max_size=5)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


def _has_bytes(value: Any) -> bool:
    if isinstance(value, bytes):
        return True
    if isinstance(value, dict):
        return any(_has_bytes(v) for v in value.values())
    return isinstance(value, (list, tuple)) and any(_has_bytes(v) for v in value)


@settings(max_examples=150, deadline=None)
@given(value=_plain, protocol=st.integers(min_value=0, max_value=pickle.HIGHEST_PROTOCOL))
def test_plain_data_of_any_protocol_loads_exactly(value: Any, protocol: int) -> None:
    data = pickle.dumps(value, protocol=protocol)
    if protocol < 3 and _has_bytes(value):
        # Python writes bytes before protocol 3 as a call to _codecs.encode: a call, refused.
        with pytest.raises(safe_pickle.PickleRefused, match="GLOBAL"):
            safe_pickle.loads(data)
    else:
        assert safe_pickle.loads(data) == value


def test_no_module_of_ours_calls_pickle_load_plainly() -> None:
    banned = {("pickle", "load"), ("pickle", "loads"), ("pickle", "Unpickler"), ("torch", "load")}
    package = Path(flight_recorder.__file__).parents[2]  # triage/
    # The exceptions: `isolated` unpickles what its own forked child pickled from the
    # results our parsers built (as the worker pool's executor does), and `knowledge.stored`
    # the knowledge an earlier run built, from a SHA-256-checked file in a cache folder only
    # this user can write (as the compiled-pattern caches are trusted); never an input's bytes.
    trusted = {package / "isolated.py": 1, package / "knowledge" / "stored.py": 1}
    for path in package.rglob("*.py"):
        found = 0
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
            ):
                call = (node.func.value.id, node.func.attr)
                found += call in banned
                assert found <= trusted.get(path, 0), f"{path}:{node.lineno} calls {'.'.join(call)}"


# =========================================================================== flight recorder


def test_real_gloo_dumps_of_a_type_mismatch_show_each_rank_last_collective() -> None:
    rank0 = fr_dump(parse_file(FR / "type" / "rank_0", SourceKind.FLIGHT_RECORDER, rank=0))
    rank1 = fr_dump(parse_file(FR / "type" / "rank_1", SourceKind.FLIGHT_RECORDER, rank=1))

    assert (rank0.rank, rank1.rank) == (0, 1)
    assert rank0.version == "2.10"
    assert [e.op for e in rank0.entries] == ["all_reduce", "all_reduce", "all_reduce"]
    assert [e.op for e in rank1.entries] == ["all_reduce", "all_reduce", "broadcast"]
    last0, last1 = rank0.entries[-1], rank1.entries[-1]
    assert last0.collective_seq_id == last1.collective_seq_id == 3
    assert last0.backend == "gloo" and last0.state == "scheduled"
    assert last0.input_sizes == ((8,),) and last0.input_dtypes == ("Float",)
    assert (last0.pg_name, last0.pg_desc) == ("0", "default_pg")
    assert last0.time_started_ns is None and last0.retired is True
    assert last1.frames[0].function == "broadcast"
    assert last1.frames[-1].filename == "/workspace/fr_case.py"
    # gloo writes pg_config as {'': ...}; with one group, its membership is that group's.
    assert rank0.pg_config == {"0": (0, 1)}
    assert rank0.pg_desc == {"0": "default_pg"}
    assert rank0.pg_status["0"]["last_enqueued_collective"] == 3
    assert rank0.comm_lib_version is None  # gloo writes ""


@pytest.mark.parametrize("mode", ["type", "missing", "shape", "dtype"])
@pytest.mark.parametrize("rank", [0, 1])
def test_the_json_dump_says_the_same_as_the_pickle_apart_from_stacks(mode: str, rank: int) -> None:
    pkl = fr_dump(parse_file(FR / mode / f"rank_{rank}", SourceKind.FLIGHT_RECORDER))
    jsn = fr_dump(parse_file(FR / mode / f"rank_{rank}.json", SourceKind.FLIGHT_RECORDER))

    assert [e.frames for e in jsn.entries] == [()] * len(jsn.entries)
    assert all(e.frames for e in pkl.entries)
    # The JSON was dumped a moment after the pickle: the last op may have retired meanwhile.
    assert tuple(e._replace(frames=(), retired=None) for e in pkl.entries) == tuple(
        e._replace(retired=None) for e in jsn.entries
    )
    # pg_status holds strings in JSON and ints in the pickle: both read as ints.
    assert pkl.pg_status.keys() == jsn.pg_status.keys()
    for status in (*pkl.pg_status.values(), *jsn.pg_status.values()):
        assert status and all(type(v) is int for v in status.values())
    assert pkl.pg_config == jsn.pg_config and pkl.version == jsn.version


def test_the_rank_that_skipped_a_collective_has_one_entry_less() -> None:
    rank0 = fr_dump(parse_file(FR / "missing" / "rank_0", SourceKind.FLIGHT_RECORDER, rank=0))
    rank1 = fr_dump(parse_file(FR / "missing" / "rank_1", SourceKind.FLIGHT_RECORDER, rank=1))
    assert len(rank0.entries) == 3 and len(rank1.entries) == 2


def test_shape_and_dtype_mismatches_are_visible_in_the_entries() -> None:
    shape = [
        fr_dump(parse_file(FR / "shape" / f"rank_{r}", SourceKind.FLIGHT_RECORDER)).entries[-1]
        for r in (0, 1)
    ]
    dtype = [
        fr_dump(parse_file(FR / "dtype" / f"rank_{r}", SourceKind.FLIGHT_RECORDER)).entries[-1]
        for r in (0, 1)
    ]
    assert [e.input_sizes for e in shape] == [((8,),), ((2, 4),)]
    assert [e.input_dtypes for e in dtype] == [("Float",), ("Int",)]


def test_the_event_text_is_a_one_line_summary_a_rule_can_read() -> None:
    parsed = parse_file(FR / "type" / "rank_1", SourceKind.FLIGHT_RECORDER, rank=1)
    (event,) = parsed.events
    assert event.text == (
        "FR dump v2.10, 3 entries, pgs 0:default_pg, last seq 3 gloo:broadcast (scheduled)"
    )
    assert event.rank == 1 and event.source.endswith("type/rank_1")
    assert event.attrs["last_op"] == "broadcast" and event.attrs["format"] == "pickle"
    assert event.time is not None and event.time > 1.7e9
    assert parsed.warnings == ()


def test_a_dump_without_a_rank_in_its_name_keeps_rank_unknown() -> None:
    parsed = parse_file(FR / "type" / "rank_0", SourceKind.FLIGHT_RECORDER, rank=None)
    assert fr_dump(parsed).rank is None and parsed.events[0].rank is None


def test_the_pre_2_3_bare_list_era_is_read_by_its_seq_id() -> None:
    entries = [
        {
            "record_id": 0,
            "pg_id": 0,
            "seq_id": 7,
            "profiling_name": "nccl:all_reduce",
            "time_created_ns": 1705000000000000000,
            "input_sizes": [[10]],
            "output_sizes": [[10]],
            "state": "started",
            "time_discovered_started_ns": 1705000000000000500,
            "time_discovered_completed_ns": None,
            "retired": False,
            "frames": [{"name": "all_reduce", "filename": "distributed_c10d.py", "line": 2050}],
        }
    ]
    dump = fr_dump(flight_recorder.parse(source(pickle.dumps(entries, protocol=2))))
    (entry,) = dump.entries
    assert dump.version is None and dump.pg_config == {}
    assert entry.collective_seq_id == 7 and entry.op_id == 7 and entry.p2p_seq_id == 0
    assert entry.pg_name == "0" and entry.state == "started" and not entry.is_p2p
    assert entry.time_started_ns == 1705000000000000500 and entry.time_completed_ns is None
    assert entry.input_dtypes == () and entry.frames[0].line == 2050


def test_the_1_x_era_has_a_version_but_no_process_groups() -> None:
    raw = {
        "version": "1.5",
        "nccl_comm_state": {},
        "entries": [
            {
                "record_id": 3,
                "pg_id": 1,
                "seq_id": 4,
                "profiling_name": "nccl:send 0->1",
                "time_created_ns": 1706000000000000000,
                "input_sizes": [[4]],
                "output_sizes": [[4]],
                "state": "scheduled",
                "time_discovered_started_ns": None,
                "time_discovered_completed_ns": None,
                "retired": False,
            }
        ],
    }
    dump = fr_dump(flight_recorder.parse(source(pickle.dumps(raw, protocol=2))))
    (entry,) = dump.entries
    assert dump.version == "1.5"
    assert entry.pg_name == "1" and entry.is_p2p and entry.op == "send"
    assert "last p2p seq 0 nccl:send 0->1" in flight_recorder._summary(dump)


def test_the_2_6_era_names_the_library_nccl_version_and_reports_timings() -> None:
    raw = {
        "version": "2.6",
        "nccl_version": "2.21.5",
        "pg_config": {
            "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
            "1": {"name": "1", "desc": "dp_replicate", "ranks": "[0, 2]"},
        },
        "pg_status": {"0": {"last_enqueued_collective": 12, "last_completed_collective": 11}},
        "entries": [
            fr_entry(11, duration_ms=1.5),
            fr_entry(
                12,
                state="started",
                time_discovered_completed_ns=None,
                process_group=("1", "dp_replicate"),
            ),
        ],
    }
    dump = fr_dump(flight_recorder.parse(source(pickle.dumps(raw, protocol=2))))
    assert dump.comm_lib_version == "2.21.5"
    assert dump.pg_config == {"0": (0, 1, 2, 3), "1": (0, 2)}
    assert dump.pg_desc == {"0": "default_pg", "1": "dp_replicate"}
    first, last = dump.entries
    assert first.duration_ms == 1.5 and first.state == "completed"
    assert last.state == "started" and last.time_completed_ns is None
    assert last.pg_name == "1" and last.duration_ms is None


def test_a_2_10_json_dump_reads_zero_times_as_not_discovered_and_string_status() -> None:
    raw = {
        "version": "2.10",
        "comm_lib_version": "2.27.3",
        "nccl_comm_state": {},
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {"0": {"last_enqueued_collective": "5", "last_started_collective": "-1"}},
        "entries": [
            fr_entry(
                5,
                process_group=["0", "default_pg"],
                state="scheduled",
                time_discovered_started_ns=0,
                time_discovered_completed_ns=0,
                thread_id="140001",
                thread_name="pt_main_thread",
            )
        ],
    }
    parsed = flight_recorder.parse(source(json.dumps(raw).encode()))
    dump = fr_dump(parsed)
    (entry,) = dump.entries
    assert entry.time_started_ns is None and entry.time_completed_ns is None
    assert dump.pg_status == {"0": {"last_enqueued_collective": 5, "last_started_collective": -1}}
    assert parsed.events[0].attrs["format"] == "json"
    assert "comm lib 2.27.3" in parsed.events[0].text


def test_gloo_pg_config_with_several_groups_is_not_guessed() -> None:
    raw = {
        "version": "2.10",
        "pg_config": {"": {"name": "", "desc": "", "ranks": "[]"}},
        "entries": [
            fr_entry(1, process_group=("0", "default_pg")),
            fr_entry(1, process_group=("1", "tp")),
        ],
    }
    dump = fr_dump(flight_recorder.parse(source(pickle.dumps(raw, protocol=2))))
    assert dump.pg_config == {}
    assert dump.pg_desc == {"0": "default_pg", "1": "tp"}


def test_entries_with_wrong_field_types_are_skipped_and_counted() -> None:
    raw = {
        "version": "2.10",
        "entries": [
            fr_entry(1),
            fr_entry(2, profiling_name=5),
            fr_entry(3, input_sizes="big"),
            fr_entry(4, state="exploded"),
            "not an entry",
            fr_entry(6, collective_seq_id=None),
            fr_entry(7, frames=[{"name": 1}]),  # a bad stack only loses the stack
        ],
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "__import__('os')"}},
    }
    parsed = flight_recorder.parse(source(pickle.dumps(raw, protocol=2)))
    dump = fr_dump(parsed)
    assert [e.collective_seq_id for e in dump.entries] == [1, 7]
    assert dump.entries[1].frames == ()
    (skipped, bad_config) = sorted(parsed.warnings, key=lambda w: not w.startswith("skipped"))
    assert skipped.startswith("skipped 5 of 7 flight-recorder entries")
    assert "profiling_name missing or not a string (1x)" in skipped
    assert "pg_config" in bad_config and dump.pg_config == {}


@pytest.mark.parametrize(
    ("name", "data", "why"),
    [
        ("truncated pickle", (FR / "type" / "rank_0").read_bytes()[:700], "truncated or corrupt"),
        ("87-byte file", (FR / "type" / "rank_0").read_bytes()[:87], "truncated or corrupt"),
        ("JSON cut mid-way", (FR / "type" / "rank_0.json").read_bytes()[:800], "JSON"),
        ("empty", b"", "empty"),
        ("whitespace", b"  \n", "empty"),
        ("a number", b"\x80\x02K\x05.", "unknown layout"),
        ("text", b"garbage", "truncated or corrupt"),
    ],
)
def test_a_damaged_dump_becomes_a_warning_not_a_crash(name: str, data: bytes, why: str) -> None:
    parsed = flight_recorder.parse(source(data))
    (event,) = parsed.events
    assert event.kind is EventKind.INPUT_WARNING and why in event.text, name
    assert event.rank == 3 and parsed.warnings[-1] == event.text


def test_a_dump_that_cannot_be_opened_is_a_warning() -> None:
    def broken() -> io.BytesIO:
        raise OSError("archive member is corrupt")

    src = Source(path="x/rank_1", kind=SourceKind.FLIGHT_RECORDER, size=10, open=broken, rank=1)
    parsed = flight_recorder.parse(src)
    assert "archive member is corrupt" in parsed.events[0].text


def _big_dump(entries: int) -> dict[str, Any]:
    """A 2,000-entry-style dump grown from a real gloo entry (one stack, like a train loop)."""
    real = safe_pickle.loads((FR / "type" / "rank_0").read_bytes())
    template = real["entries"][0]
    out = []
    for i in range(entries):
        entry = dict(template)
        entry.update(record_id=i, collective_seq_id=i + 1, op_id=i + 1)
        out.append(entry)
    real["entries"] = out
    return real


def test_a_2000_entry_dump_loads_whole_with_one_shared_stack() -> None:
    data = pickle.dumps(_big_dump(2000), protocol=2)
    parsed = flight_recorder.parse(source(data))  # its time: bench/guard_timings.py
    dump = fr_dump(parsed)
    assert gc.isenabled()  # the loader pauses the cyclic GC and must give it back
    assert len(dump.entries) == 2000 and dump.entries[-1].collective_seq_id == 2000
    # One stack shared by all entries, not 2,000 copies.
    assert dump.entries[0].frames is dump.entries[-1].frames


def test_deeply_nested_junk_inside_an_entry_does_not_crash_the_loader() -> None:
    # 100,000 nested lists: deeper than any recursion limit, built opcode by opcode.
    raw = {"version": "2.10", "entries": [fr_entry(1, input_sizes="DEEP"), fr_entry(2)]}
    marker = b"X\x04\x00\x00\x00DEEP"
    nested = b"]" * 100_000 + b"a" * 99_999
    data = pickle.dumps(raw, protocol=2).replace(marker, nested)
    parsed = flight_recorder.parse(source(data))
    assert [e.collective_seq_id for e in fr_dump(parsed).entries] == [2]


# =========================================================================== py-spy


def pyspy_events(name: str, rank: int | None = 3) -> list[Any]:
    return list(parse_file(PYSPY / name, SourceKind.PYSPY, rank=rank).events)


def test_a_rank_stuck_in_all_reduce_shows_its_stack_as_py_spy_prints_it() -> None:
    (event,) = pyspy_events("rank0_allreduce.txt")
    assert event.kind is EventKind.PYSPY and event.pid == 13105 and event.rank == 3
    assert event.text.splitlines() == [
        'Thread 13105 (idle): "MainThread"',
        "    all_reduce (torch/distributed/distributed_c10d.py:3252)",
        "    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)",
        "    train_step (hang.py:8)",
        "    <module> (hang.py:12)",
    ]
    dump = event.payload
    assert isinstance(dump, PySpyDump)
    assert dump.python_version == "3.11.7" and dump.command == "/venv/bin/python3 -u hang.py"
    main = dump.main_thread()
    assert main is not None and main.status == "idle" and not main.owns_gil
    assert event.attrs["top_function"] == "all_reduce"
    assert (event.line, event.end_line) == (1, 8)


def test_the_straggler_rank_is_seen_somewhere_else() -> None:
    (event,) = pyspy_events("rank1_dataloader.txt")
    assert event.payload.threads[0].frames[0].function == "load_batch"


def test_json_and_text_dumps_of_one_process_agree() -> None:
    (text_event,) = pyspy_events("rank0_allreduce.txt")
    (json_event,) = pyspy_events("rank0_allreduce.json")
    assert json_event.text == text_event.text
    assert json_event.pid == 13105
    assert json_event.payload.threads == text_event.payload.threads


def test_locals_blocks_are_skipped_in_text_and_json() -> None:
    (plain,) = pyspy_events("rank0_allreduce.txt")
    (with_locals,) = pyspy_events("rank0_locals.txt")
    (json_locals,) = pyspy_events("rank0_locals.json")
    assert with_locals.text == plain.text == json_locals.text


def test_native_frames_keep_their_library_and_no_line() -> None:
    (event,) = pyspy_events("rank1_native.txt")
    frames = event.payload.threads[0].frames
    assert (frames[0].function, frames[0].filename, frames[0].line) == (
        "clock_nanosleep",
        "libc.so.6",
        None,
    )
    assert frames[2].function == "load_batch" and frames[2].line == 6
    assert "    clock_nanosleep (libc.so.6)" in event.text


def test_a_subprocess_dump_of_the_agent_gives_one_event_per_process() -> None:
    events = pyspy_events("agent_subprocesses.txt")
    assert [e.pid for e in events] == [13100, 13106, 13105]
    assert events[0].rank == 3 and events[1].rank is None and events[2].rank is None
    assert events[1].attrs["parent_pid"] == 13100
    assert events[0].attrs["top_function"] == "SimpleElasticAgent._invoke_run"
    assert events[2].attrs["top_function"] == "all_reduce"


_MULTI_THREAD = """\
Process 4242: python train.py --fsdp
Python v3.10.12 (/usr/bin/python3.10)

Thread 4301 (active+gil): "pt_autograd_0"
    evaluate_function (torch/autograd/graph.py:744)
Thread 0x7F2A1B2C3D40 (idle)
    wait (threading.py:320)
Thread 4242 (active): "MainThread"
    synchronize (torch/cuda/__init__.py:801)
    train (train.py:41)
        Locals:
            step: 1200
    c10d::ProcessGroupNCCL::WorkNCCL::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >) \
(libtorch_cuda.so)
"""


def test_the_main_thread_is_found_wherever_it_is_and_colour_codes_do_not_matter() -> None:
    coloured = _MULTI_THREAD.replace("Thread 4242", "Thread \x1b[1;33m4242\x1b[0m")
    (event,) = pyspy.parse(source(coloured.encode(), SourceKind.PYSPY)).events
    dump = event.payload
    assert [t.thread_id for t in dump.threads] == ["4301", "0x7F2A1B2C3D40", "4242"]
    assert dump.threads[0].owns_gil and dump.threads[1].name is None
    assert event.text.startswith('Thread 4242 (active): "MainThread"\n    synchronize')
    native = dump.threads[2].frames[-1]
    assert native.filename == "libtorch_cuda.so" and native.function.startswith("c10d::")


def test_json_threads_without_os_ids_or_entry_flags_are_read() -> None:
    threads = [
        {
            "pid": 77,
            "thread_id": 139741632539520,
            "thread_name": "Thread-1",
            "os_thread_id": None,
            "active": True,
            "owns_gil": True,
            "frames": [{"name": "run", "filename": "/x/threading.py", "line": 975}],
        },
        {
            "pid": 77,
            "thread_id": 1,
            "thread_name": "MainThread",
            "os_thread_id": 77,
            "active": False,
            "owns_gil": False,
            "frames": [
                {
                    "name": "barrier",
                    "filename": "/x/c10d.py",
                    "short_filename": "c10d.py",
                    "line": 9,
                },
                {"name": "ncclGroupEnd", "filename": "", "module": "libnccl.so.2", "line": 0},
            ],
        },
    ]
    (event,) = pyspy.parse(source(json.dumps(threads).encode(), SourceKind.PYSPY)).events
    dump = event.payload
    assert dump.pid == 77 and event.pid == 77
    assert (
        dump.threads[0].thread_id == f"0x{139741632539520:X}"
        and dump.threads[0].status == "active+gil"
    )
    assert event.text.splitlines() == [
        'Thread 77 (idle): "MainThread"',
        "    barrier (c10d.py:9)",
        "    ncclGroupEnd (libnccl.so.2)",
    ]


@pytest.mark.parametrize(
    ("name", "failure", "says"),
    [
        ("permission_denied.txt", "permission_denied", "run py-spy as root"),
        ("docker_no_ptrace.txt", "no_ptrace_capability", "--cap-add SYS_PTRACE"),
        ("no_interpreter.txt", "no_interpreter", "could not find the Python interpreter"),
        ("not_permitted.txt", "not_permitted", "Operation not permitted"),
        ("no_such_pid.txt", "process_gone", "no longer running"),
    ],
)
def test_a_failed_py_spy_run_says_why_the_stack_is_missing(
    name: str, failure: str, says: str
) -> None:
    parsed = parse_file(PYSPY / name, SourceKind.PYSPY)
    (event,) = parsed.events
    assert event.kind is EventKind.INPUT_WARNING and event.attrs["failure"] == failure
    assert event.text.startswith("py-spy could not dump the process") and says in event.text
    assert parsed.warnings == (event.text,)


def test_a_file_of_several_dumps_keeps_stacks_and_the_one_that_failed() -> None:
    good = (PYSPY / "rank0_allreduce.txt").read_text()
    bad = (PYSPY / "permission_denied.txt").read_text()
    parsed = pyspy.parse(source((good + "\n" + bad).encode(), SourceKind.PYSPY))
    kinds = sorted(e.kind.value for e in parsed.events)
    assert kinds == ["input_warning", "pyspy"]


def test_a_py_spy_file_with_no_stack_is_a_warning() -> None:
    for data in (b"", b'[{"pid": 1, "frames": ', b"nothing to see here\n", b"{}"):
        parsed = pyspy.parse(source(data, SourceKind.PYSPY))
        (event,) = parsed.events
        assert event.kind is EventKind.INPUT_WARNING and parsed.warnings


# =========================================================================== elastic error


def test_a_worker_error_file_gives_the_exit_and_the_traceback() -> None:
    parsed = parse_file(
        ELASTIC / "worker_error.json", SourceKind.ELASTIC_ERROR, rank=1, local_rank=1
    )
    (error,) = only(parsed, EventKind.ELASTIC_ERROR)
    (trace,) = only(parsed, EventKind.TRACEBACK)
    exit_record = error.payload
    assert isinstance(exit_record, RankExit)
    assert exit_record.message is not None
    assert exit_record.message.startswith("OutOfMemoryError: CUDA out of memory.")
    assert exit_record.time == 1796205857.0 and error.time == 1796205857.0
    assert exit_record.error_file == str(ELASTIC / "worker_error.json")
    assert (exit_record.rank, exit_record.local_rank, exit_record.exitcode) == (1, 1, None)
    assert (
        error.attrs["schema"] == "worker" and error.exception.exc_type == "torch.OutOfMemoryError"
    )
    assert trace.text.startswith("Traceback (most recent call last):")
    assert trace.text.endswith("of which 1.02 GiB is free.")
    assert trace.exception.exc_type == "torch.OutOfMemoryError"
    assert trace.exception.exc_message.startswith("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert trace.rank == 1 and parsed.warnings == ()


def test_the_agents_copy_carries_the_exit_code() -> None:
    parsed = parse_file(ELASTIC / "agent_error.json", SourceKind.ELASTIC_ERROR)
    (error,) = only(parsed, EventKind.ELASTIC_ERROR)
    assert error.payload.exitcode == 1 and error.attrs["schema"] == "agent"
    assert len(only(parsed, EventKind.TRACEBACK)) == 1


def test_an_indented_agent_copy_of_a_segfault_names_the_signal() -> None:
    parsed = parse_file(ELASTIC / "agent_copy_indent2_sigsegv.json", SourceKind.ELASTIC_ERROR)
    (error,) = only(parsed, EventKind.ELASTIC_ERROR)
    (trace,) = only(parsed, EventKind.TRACEBACK)
    assert (error.payload.exitcode, error.payload.signal) == (-11, "SIGSEGV")
    assert trace.exception.exc_type == "RuntimeError"
    assert trace.exception.exc_message.startswith("CUDA error: an illegal memory access")
    assert "CUDA_LAUNCH_BLOCKING=1" in trace.exception.exc_message


def test_a_legacy_string_message_is_read_with_its_top_level_timestamp() -> None:
    parsed = parse_file(ELASTIC / "legacy_string_message.json", SourceKind.ELASTIC_ERROR)
    (error,) = parsed.events
    assert error.kind is EventKind.ELASTIC_ERROR and error.time == 1767607928.0
    assert error.text.startswith("RuntimeError: NCCL communicator was aborted on rank 5")
    assert error.exception.exc_type == "RuntimeError" and error.attrs["schema"] == "legacy"


def test_an_error_recorded_outside_an_except_block_has_no_traceback_event() -> None:
    data = json.dumps(
        {
            "message": {
                "message": "ValueError: bad config",
                "extraInfo": {"py_callstack": "NoneType: None\n", "timestamp": "1767607928"},
            }
        }
    ).encode()
    parsed = elastic_error.parse(source(data, SourceKind.ELASTIC_ERROR))
    assert [e.kind for e in parsed.events] == [EventKind.ELASTIC_ERROR]
    assert parsed.events[0].exception.exc_type == "ValueError"


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "empty"),
        (b'{"message": {"message": "RuntimeError: bo', "truncated or not JSON"),
        (b"[1, 2]", "not an object"),
        (b'{"other": 1}', "no 'message'"),
    ],
)
def test_a_damaged_error_file_becomes_a_warning(data: bytes, why: str) -> None:
    parsed = elastic_error.parse(source(data, SourceKind.ELASTIC_ERROR))
    (event,) = parsed.events
    assert event.kind is EventKind.INPUT_WARNING and why in event.text


def test_the_last_exception_of_a_chained_traceback_is_the_one_reported() -> None:
    stack = (
        "Traceback (most recent call last):\n"
        '  File "a.py", line 1, in <module>\n'
        "    f()\n"
        "KeyError: 'x'\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "a.py", line 3, in <module>\n'
        "    g()\n"
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\n"
    )
    exc_type, message = elastic_error.exception_of(stack)
    assert exc_type == "torch.distributed.DistBackendError"
    assert message == (
        "NCCL error in: ProcessGroupNCCL.cpp:1970\n"
        "ncclUnhandledCudaError: Call to CUDA function failed."
    )
    assert elastic_error.exception_of("KeyboardInterrupt\n") == ("KeyboardInterrupt", "")


# =========================================================================== env reports


def env_reports(name: str) -> list[EnvReport]:
    parsed = parse_file(ENV / name, SourceKind.ENV_REPORT)
    assert all(e.kind is EventKind.ENV_REPORT for e in parsed.events), parsed.warnings
    return [e.payload for e in parsed.events]


def test_collect_env_from_a_gpu_box_gives_versions_gpus_and_the_bundled_nccl() -> None:
    (report,) = env_reports("collect_env_gpu.txt")
    assert report.report_kind == "collect_env"
    facts = report.facts
    assert facts["torch"] == "2.3.1+cu121" and facts["cuda_build"] == "12.1"
    assert facts["cuda_runtime"] == "12.4.131" and facts["driver"] == "550.54.15"
    assert facts["gpu_models"] == "NVIDIA H100 80GB HBM3" and facts["gpu_count"] == "4"
    assert facts["python"] == "3.10.14" and facts["gcc"] == "11.4.0"
    assert facts["os"] == "Ubuntu 22.04.4 LTS (x86_64)"
    assert facts["nccl"] == "2.20.5"  # from [pip3] nvidia-nccl-cu12==2.20.5
    assert report.packages["torch"] == "2.3.1+cu121" and report.packages["triton"] == "2.3.1"


def test_real_collect_env_on_a_cpu_box_claims_no_gpu_and_no_cuda_build() -> None:
    (report,) = env_reports("collect_env_cpu.txt")
    facts = report.facts
    assert facts["torch"] == "2.13.0+cpu" and facts["python"] == "3.11.7"
    assert facts["os"].startswith("Debian GNU/Linux 12")
    assert "cuda_build" not in facts and "gpu_models" not in facts and "driver" not in facts
    assert report.packages == {"numpy": "2.4.6", "torch": "2.13.0+cpu"}  # not lscpu lines


def test_a_single_gpu_collect_env_names_the_gpu_on_the_key_line() -> None:
    text = (
        b"PyTorch version: 2.1.2+cu118\n"
        b"GPU models and configuration: GPU 0: NVIDIA A100-SXM4-80GB\n"
        b"Nvidia driver version: 535.104.05\n\n"
        b"Versions of relevant libraries:\n[pip3] No relevant packages\n[conda] Could not collect\n"
    )
    (event,) = env_report.parse(source(text, SourceKind.ENV_REPORT)).events
    report = event.payload
    assert (
        report.facts["gpu_models"] == "NVIDIA A100-SXM4-80GB" and report.facts["gpu_count"] == "1"
    )
    assert report.facts["cuda_build"] == "11.8"  # from the +cu118 tag of the torch version
    assert report.packages == {}


def test_ds_report_with_colour_codes_gives_versions_shm_and_missing_ops() -> None:
    (report,) = env_reports("ds_report_ansi.txt")
    facts = report.facts
    assert report.report_kind == "ds_report"
    assert facts["torch"] == "2.3.0+cu121" and facts["deepspeed"] == "0.15.5+46d7d0d1"
    assert facts["nvcc"] == "12.0" and facts["cuda_build"] == "12.1"
    assert facts["shm_size"] == "64.00 MB"
    assert facts["ds_ops_installed"] == "cpu_adam"
    assert facts["ds_ops_incompatible"] == "async_io, sparse_attn"


def test_pip_list_and_freeze_give_the_same_packages() -> None:
    (listed,) = env_reports("pip_list_real.txt")
    (frozen,) = env_reports("pip_freeze_real.txt")
    assert listed.packages["torch"] == frozen.packages["torch"] == "2.13.0+cpu"
    common = set(listed.packages) & set(frozen.packages)
    assert len(common) >= 50
    assert all(listed.packages[p] == frozen.packages[p] for p in common)


def test_framework_versions_come_from_the_package_list() -> None:
    (report,) = env_reports("pip_mixed.txt")
    assert report.facts == {
        "accelerate": "0.30.1",
        "deepspeed": "0.14.2",
        "megatron": "0.7.0",
        "nccl": "2.21.5",
        "torch": "2.4.0",
        "transformers": "4.41.2",
    }


def test_nvidia_smi_tables_old_and_new_give_driver_gpus_and_memory() -> None:
    (new,) = env_reports("nvidia_smi.txt")
    (old,) = env_reports("nvidia_smi_old.txt")
    assert new.facts["driver"] == "550.54.15" and new.facts["driver_cuda"] == "12.4"
    assert new.facts["gpu_count"] == "2" and new.facts["gpu_models"] == "NVIDIA H100 80GB HBM3"
    assert new.facts["gpu_memory"] == "81559MiB"
    assert old.facts["driver"] == "525.85.12" and old.facts["gpu_count"] == "1"


def test_nvidia_smi_query_csv_and_list_forms() -> None:
    csv = (
        b"name, driver_version, memory.total [MiB]\nNVIDIA A100-SXM4-80GB, 535.104.05, 81920 MiB\n"
    )
    (event,) = env_report.parse(source(csv, SourceKind.ENV_REPORT)).events
    assert event.payload.facts["driver"] == "535.104.05"
    assert event.payload.facts["gpu_models"] == "NVIDIA A100-SXM4-80GB"
    listed = b"GPU 0: NVIDIA L4 (UUID: GPU-1234)\nGPU 1: NVIDIA L4 (UUID: GPU-5678)\n"
    (event,) = env_report.parse(source(listed, SourceKind.ENV_REPORT)).events
    assert (
        event.payload.facts["gpu_count"] == "2" and event.payload.facts["gpu_models"] == "NVIDIA L4"
    )


def test_an_env_dump_keeps_distributed_settings_and_drops_everything_else() -> None:
    (report,) = env_reports("env_vars.txt")
    assert report.env_vars["NCCL_SOCKET_IFNAME"] == "eth0"
    assert report.env_vars["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    assert report.env_vars["MASTER_ADDR"] == "node001" and report.env_vars["WORLD_SIZE"] == "16"
    assert report.env_vars["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert not {"HOME", "PATH", "HF_TOKEN"} & set(report.env_vars)
    exported = b'export NCCL_P2P_DISABLE=1\ndeclare -x TORCH_NCCL_SECRET_TOKEN="x"\n'
    (event,) = env_report.parse(source(exported, SourceKind.ENV_REPORT)).events
    assert event.payload.env_vars == {"NCCL_P2P_DISABLE": "1"}
    assert "NCCL_P2P_DISABLE=1" in event.text


def test_conda_list_and_conda_lines_of_collect_env_name_torch_pytorch() -> None:
    listed = (
        b"# packages in environment at /opt/conda:\n#\n"
        b"# Name                    Version                   Build  Channel\n"
        b"nccl                      2.21.5.1             h3a97aeb_0    conda-forge\n"
        b"pytorch                   2.3.0           py3.10_cuda12.1_cudnn8.9.2_0    pytorch\n"
    )
    (event,) = env_report.parse(source(listed, SourceKind.ENV_REPORT)).events
    assert event.payload.report_kind == "conda"
    assert event.payload.facts == {"nccl": "2.21.5.1", "torch": "2.3.0"}


def test_words_that_look_like_variables_in_prose_are_not_taken_for_settings() -> None:
    text = (
        b"RANK 3 failed first\n"
        b"NCCL WARN NET/IB : Got completion with error\n"
        b"setenv NCCL_DEBUG WARN\n"
    )
    (event,) = env_report.parse(source(text, SourceKind.ENV_REPORT)).events
    assert event.payload.env_vars == {"NCCL_DEBUG": "WARN"}


def test_a_bug_report_pasting_several_reports_gives_one_event_each_in_order() -> None:
    text = (
        (ENV / "collect_env_gpu.txt").read_text()
        + "\n$ env | grep NCCL\nNCCL_DEBUG=INFO\nNCCL_IB_HCA=mlx5\n\n$ pip freeze\n"
        + "deepspeed==0.14.2\nnvidia-nccl-cu12==2.21.5\n"
    )
    parsed = env_report.parse(source(text.encode(), SourceKind.ENV_REPORT))
    kinds = [e.payload.report_kind for e in parsed.events]
    assert kinds == ["collect_env", "env_vars", "pip"]
    assert parsed.events[1].payload.env_vars == {"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5"}
    assert parsed.events[2].payload.facts == {"deepspeed": "0.14.2", "nccl": "2.21.5"}
    assert parsed.events[0].line == 1 and parsed.events[1].line > parsed.events[0].end_line - 1


def test_text_with_no_report_in_it_is_a_warning() -> None:
    parsed = env_report.parse(source(b"hello\nworld\n", SourceKind.ENV_REPORT))
    (event,) = parsed.events
    assert event.kind is EventKind.INPUT_WARNING and "no versions" in event.text


# =========================================================================== no input crashes


_REAL_SAMPLES = {
    SourceKind.FLIGHT_RECORDER: [
        (FR / "type" / "rank_1").read_bytes(),
        (FR / "type" / "rank_1.json").read_bytes(),
    ],
    SourceKind.PYSPY: [
        (PYSPY / "agent_subprocesses.txt").read_bytes(),
        (PYSPY / "rank0_locals.json").read_bytes(),
    ],
    SourceKind.ELASTIC_ERROR: [
        (ELASTIC / "worker_error.json").read_bytes(),
        (ELASTIC / "agent_copy_indent2_sigsegv.json").read_bytes(),
    ],
    SourceKind.ENV_REPORT: [
        (ENV / "collect_env_gpu.txt").read_bytes(),
        (ENV / "ds_report_ansi.txt").read_bytes(),
        (ENV / "nvidia_smi.txt").read_bytes(),
    ],
}


def _assert_sane(parsed: ParsedSource, kind: SourceKind) -> None:
    assert isinstance(parsed, ParsedSource)
    assert parsed.events, "every input yields at least an event or a warning event"
    for event in parsed.events:
        assert isinstance(event.kind, EventKind) and isinstance(event.text, str)
    if kind is not SourceKind.FLIGHT_RECORDER:
        # "never crashes" must not mean an exception swallowed into a warning (the
        # flight-recorder parser reports a damaged pickle by the decoder's exception)
        texts = [*parsed.warnings, *(e.text for e in parsed.events)]
        assert not [t for t in texts if PARSER_STOPPED in t], kind


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(PARSERS, key=str)), data=st.binary(max_size=2048))
def test_random_bytes_never_crash_a_parser(kind: SourceKind, data: bytes) -> None:
    _assert_sane(PARSERS[kind](source(data, kind)), kind)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(PARSERS, key=str)),
    which=st.integers(min_value=0, max_value=2),
    cut=st.floats(min_value=0, max_value=1),
    flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=4),
)
def test_truncated_or_bit_flipped_real_inputs_never_crash_a_parser(
    kind: SourceKind, which: int, cut: float, flips: list[tuple[float, int]]
) -> None:
    samples = _REAL_SAMPLES[kind]
    data = bytearray(samples[which % len(samples)])
    for where, value in flips:
        data[int(where * (len(data) - 1))] = value
    data = data[: int(cut * len(data))]
    _assert_sane(PARSERS[kind](source(bytes(data), kind)), kind)


@settings(max_examples=200, deadline=None)
@given(value=_plain)
def test_any_plain_pickle_or_json_value_is_a_dump_or_a_warning(value: Any) -> None:
    for data in (pickle.dumps(value, protocol=2), json.dumps(value, default=repr).encode()):
        _assert_sane(flight_recorder.parse(source(data)), SourceKind.FLIGHT_RECORDER)
