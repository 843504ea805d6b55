"""Where a dump is decoded in a process whose crash or hang costs only that dump (the small
job's decoding child, a pool worker), its pickle is loaded before it is scanned, under an
address-space limit. What the scan up front refused is still refused, with the scan's own
words, and a run with such a dump still diagnoses the rest of the job: a memo bomb, a length
past the end, a set, an integer too wide to be a timestamp. Plain data that merely loops or
shares (a list holding itself, a tuple holding one tuple many times) costs its entry alone.

Each run happens in a child process with a timeout, so that a crash or a hang fails the test
instead of taking pytest down.
"""

from __future__ import annotations

import json
import pickle
import pickletools
from pathlib import Path
from typing import Any

import pytest

from tests.cli_runs import run_elsewhere
from tests.fr_samples import fr_entry
from triage.parsers import flight_recorder

_LOG = "[rank0]: RuntimeError: boom in the training step\n"
_MARK = "MARK_FOR_THE_HOSTILE_VALUE"


def _dump_with(field: str, value: bytes, protocol: int = 4) -> bytes:
    """A 4-entry dump whose third entry holds the opcodes `value` in `field` (the top-level
    `version`, or a value of `pg_status`), framed as Python's pickler frames it."""
    rows: list[Any] = [fr_entry(seq) for seq in range(1, 5)]
    top: dict[str, Any] = {"version": "2.10", "entries": rows}
    if field == "version":
        top["version"] = _MARK
    elif field == "pg_status":
        top["pg_status"] = {"0": {"last_enqueued_collective": _MARK}}
    else:
        rows[2][field] = _MARK
    data = pickle.dumps(top, protocol=protocol)
    at = next(pos for _, arg, pos in pickletools.genops(data) if arg == _MARK)
    end = at + 1 + (1 if data[at] == 0x8C else 4) + len(_MARK)
    data = data[:at] + value + data[end:]
    if protocol >= 4:  # the one frame's length says what it now holds
        data = data[:3] + (len(data) - 11).to_bytes(8, "little") + data[11:]
    return data


# LONG_BINPUT slot 10**9 after a value: CPython's unpickler would zero-fill a 16 GB memo
_MEMO_BOMB = b"K\x07r\x00\xca\x9a\x3b"
# BINUNICODE8 claiming a terabyte
_LONG_TEXT = b"\x8d" + (1 << 40).to_bytes(8, "little") + b"abc"
# EMPTY_SET, MARK, two ints, ADDITEMS
_SET = b"\x8f(K\x01K\x02\x90"
# LONG1 of 80 bytes: wider than any timestamp (the scan allows 64)
_WIDE = b"\x8a\x50" + b"\x01" * 80
# INT as decimal text of 4,000 digits: a number the C unpickler reads and float() overflows
_WIDE_TEXT = b"I" + b"9" * 4000 + b"\n"
# A tuple holding one tuple twice, 60 levels down: 2**60 items to compare or hash
_SHARED = b")" + b"2\x86" * 60


def _job(folder: Path, hostile: bytes) -> Path:
    folder.mkdir()
    (folder / "rank0.log").write_text(_LOG)
    (folder / "nccl_trace_rank_0").write_bytes(hostile)
    good = {"version": "2.10", "entries": [fr_entry(seq) for seq in range(1, 5)]}
    (folder / "nccl_trace_rank_1").write_bytes(pickle.dumps(good, protocol=4))
    return folder


def _cli(job: Path) -> dict[str, Any]:
    """The job's inputs as the CLI reports them: {file name: (warnings, FR entries read)}."""
    code = "from triage.cli import main\nmain([sys.argv[1], '--format', 'json', '--no-embed'])\n"
    done = run_elsewhere(code, str(job))
    assert done.returncode == 0, done.stderr[-800:]
    report = json.loads(done.stdout)
    assert "RuntimeError: boom in the training step" in [e["text"] for e in report["evidence"]]
    return {Path(i["path"]).name: i["warnings"] for i in report["inputs"]}


def _pool(job: Path) -> dict[str, Any]:
    """The same, the dumps read by the worker pool."""
    code = (
        "import json\n"
        "from triage import pipeline\n"
        "d = pipeline.diagnose([sys.argv[1]],"
        " pipeline.Options(workers=2, parallel_from_bytes=0, use_embeddings=False))\n"
        "print(json.dumps({i.path: list(i.warnings) for i in d.inputs}))\n"
    )
    done = run_elsewhere(code, str(job))
    assert done.returncode == 0, done.stderr[-800:]
    return {Path(path).name: said for path, said in json.loads(done.stdout).items()}


_REFUSED = [
    pytest.param(
        "time_created_ns", _MEMO_BOMB, "refused: pickle asks for memo slot 1000000000", id="memo"
    ),
    pytest.param("state", _LONG_TEXT, "BINUNICODE8 at byte", id="long-text"),
    pytest.param("input_sizes", _SET, "refused: pickle opcode EMPTY_SET", id="set"),
    pytest.param("time_created_ns", _WIDE, "refused: integer of 80 bytes", id="wide-int"),
    pytest.param("op_id", _WIDE_TEXT, "refused: integer of 4000 digits", id="wide-text"),
    pytest.param("version", _WIDE, "refused: integer of 80 bytes", id="wide-version"),
    pytest.param("pg_status", _WIDE, "refused: integer of 80 bytes", id="wide-status"),
]


@pytest.mark.parametrize(("field", "value", "said"), _REFUSED)
def test_what_the_scan_refuses_is_refused_where_the_load_comes_first(
    tmp_path: Path, field: str, value: bytes, said: str
) -> None:
    data = _dump_with(field, value)
    # the same words where the scan runs first (this process: nothing contained)
    dump, why = flight_recorder.load_dump(data)
    assert dump is None and why is not None and said in why, why
    warnings = _cli(_job(tmp_path / "job", data))
    assert any(said in w for w in warnings["nccl_trace_rank_0"]), warnings
    assert warnings["nccl_trace_rank_1"] == []


@pytest.mark.parametrize(("field", "value", "said"), [_REFUSED[0], _REFUSED[2], _REFUSED[3]])
def test_what_the_scan_refuses_is_refused_by_a_pool_worker_too(
    tmp_path: Path, field: str, value: bytes, said: str
) -> None:
    warnings = _pool(_job(tmp_path / "job", _dump_with(field, value)))
    assert any(said in w for w in warnings["nccl_trace_rank_0"]), warnings
    assert warnings["nccl_trace_rank_1"] == []


def test_a_list_holding_itself_costs_its_entry_alone(tmp_path: Path) -> None:
    # EMPTY_LIST, MEMOIZE (the next slot), MARK, GET of that slot, APPENDS: [[...]]
    rows: list[Any] = [fr_entry(seq) for seq in range(1, 5)]
    looped: list[Any] = []
    looped.append(looped)
    rows[2] = looped
    data = pickle.dumps({"version": "2.10", "entries": rows}, protocol=4)
    warnings = _cli(_job(tmp_path / "job", data))
    said = "skipped 1 of 4 flight-recorder entries with bad fields: entry is not a dict (1x)"
    assert warnings["nccl_trace_rank_0"] == [said]


def test_a_tuple_shared_exponentially_in_an_entry_costs_that_entry_alone(tmp_path: Path) -> None:
    data = _dump_with("process_group", _SHARED)
    warnings = _cli(_job(tmp_path / "job", data))
    said = "process_group is not a (name, desc) pair of strings (1x)"
    assert any(said in w for w in warnings["nccl_trace_rank_0"]), warnings
