"""Dumps re-saved with Python's pickler at protocols 4-5 are as untrusted as torch's own: a
call, a memo bomb, an out-of-band buffer or a cut anywhere gives a clear message, never code
run, a traceback or a hang."""

from __future__ import annotations

import json
import os
import pickle
import pickletools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fr_samples import fr_entry

from triage.parsers import flight_recorder


class _Touch:
    """Unpickled by a plain `pickle.load`, this creates the file: the proof code ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.path,))


def _dump(protocol: int, entries: int = 300, extra: Any = None, at: int | None = None) -> bytes:
    rows: list[Any] = [fr_entry(seq) for seq in range(1, entries + 1)]
    if extra is not None:
        rows.insert(entries // 2 if at is None else at, extra)
    return pickle.dumps({"version": "2.10", "entries": rows}, protocol=protocol)


@pytest.mark.parametrize("protocol", [4, 5])
@pytest.mark.parametrize(("tail", "at"), [(None, 150), (None, 295), (16, 295)])
def test_a_call_inside_a_re_saved_dump_is_refused_and_never_run(
    protocol: int, tail: int | None, at: int, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    data = _dump(protocol, extra={"profiling_name": _Touch(marker)}, at=at)
    dump, why = flight_recorder.load_dump(data, tail=tail)
    assert dump is None and why is not None
    assert "refused" in why and "imports a global" in why
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [4, 5])
def test_a_call_in_the_part_a_tail_read_skips_is_never_run(protocol: int, tmp_path: Path) -> None:
    # a big job reads only the beginning and the last entries: what lies between is never
    # loaded, so it can run nothing (as in torch's own layout)
    marker = tmp_path / "ran"
    data = _dump(protocol, extra={"profiling_name": _Touch(marker)}, at=150)
    dump, why = flight_recorder.load_dump(data, tail=16, whole=False)
    assert dump is not None, why
    assert [e.collective_seq_id for e in dump.entries] == list(range(285, 301))
    assert not marker.exists()


def _framed(body: bytes) -> bytes:
    """`body` as protocol 4 writes it: in a frame whose header says its length."""
    return b"\x80\x04\x95" + len(body).to_bytes(8, "little") + body


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"\x80\x04]r\x00\xca\x9a\x3b.", "memo slot 1000000000"),  # a 16 GB memo table
        (_framed(b"]r\x00\xca\x9a\x3b."), "memo slot 1000000000"),  # the same inside a frame
        (_framed(b"]p1000000000\n."), "memo slot b'1000000000'"),  # PUT, as text
        (_framed(b"B\xff\xff\xff\x7f."), "claims 2147483647 bytes"),  # BINBYTES, 2 GB
        (_framed(b"\x8e" + (1 << 62).to_bytes(8, "little") + b"."), "claims 461168"),
        (_framed(b"\x95" + (1 << 40).to_bytes(8, "little") + b"N."), "truncated or corrupt"),
        (b"\x80\x05\x97.", "out-of-band buffer"),  # NEXT_BUFFER
        (pickle.dumps(bytearray(b"x" * 8), protocol=5), "bytearray"),
        (pickle.dumps({"entries": [{1, 2}]}, protocol=4), "builds a set"),
    ],
)
def test_what_protocols_4_and_5_added_is_refused_with_its_reason(data: bytes, said: str) -> None:
    for tail in (None, 16):
        dump, why = flight_recorder.load_dump(data, tail=tail)
        assert dump is None and why is not None and said in why


def test_a_re_saved_dump_cut_anywhere_says_so_and_never_raises() -> None:
    data = _dump(4, entries=1000)  # 135 KB: three frames
    frames = [pos for op, _, pos in pickletools.genops(data) if op.name == "FRAME"]
    assert len(frames) > 1  # cuts at frame boundaries, inside frames and inside payloads
    cuts = sorted({*frames, *(f + 9 for f in frames), *range(1, len(data), 997)})
    for cut in cuts:
        for tail in (None, 16):
            dump, why = flight_recorder.load_dump(data[:cut], tail=tail)
            assert dump is None and why is not None, cut
            assert "truncated or corrupt" in why or "empty" in why, why


@pytest.mark.parametrize("protocol", [4, 5])
def test_a_re_saved_dump_gives_the_same_entries_read_whole_or_in_part(protocol: int) -> None:
    data = _dump(protocol)
    whole, _ = flight_recorder.load_dump(data)
    part, _ = flight_recorder.load_dump(data, tail=16)
    assert whole is not None and part is not None
    assert part.entries == whole.entries[-16:] and part.entries_total == 300


@pytest.mark.parametrize("protocol", [4, 5])
def test_a_re_saved_dump_is_cut_without_decoding_it_whole(protocol: int) -> None:
    data = _dump(protocol)
    whole, _ = flight_recorder.load_dump(data)
    # whole=False: what a job too big to decode does; a dump the cut fails on is not read
    part, why = flight_recorder.load_dump(data, tail=16, whole=False)
    assert whole is not None and part is not None, why
    assert part.entries == whole.entries[-16:] and part.entries_total == 300


@pytest.mark.parametrize("protocol", [4, 5])
@pytest.mark.parametrize(("first_at", "cut"), [(150, True), (290, False)])
def test_kept_entries_naming_an_object_first_written_late_read_the_same(
    protocol: int, first_at: int, cut: bool
) -> None:
    # Protocol 4 numbers memo slots by counting: the kept entries name an object first
    # written at entry `first_at` by a slot only a beginning that holds it numbers. Mid-
    # buffer (a new stack): a longer beginning is read. Inside the kept entries (a state
    # only the last ones have): the dump is read whole. Either way, the same entries.
    rows: list[Any] = [fr_entry(seq) for seq in range(1, 301)]
    late = "".join(["sched", "uled"])  # one str object, written once, then named by slot
    frame = {"name": "eval_step", "filename": "/workspace/eval.py", "line": 7}
    for row in rows[first_at:]:
        row["state"] = late
        row["frames"] = [frame]
    data = pickle.dumps({"version": "2.10", "entries": rows}, protocol=protocol)
    whole, _ = flight_recorder.load_dump(data)
    part, why = flight_recorder.load_dump(data, tail=16)
    assert whole is not None and part is not None, why
    assert part.entries == whole.entries[-16:] and part.entries_total == 300
    assert part.entries[-1].state == "scheduled" and part.entries[-1].frames
    # whole=False: a dump the cut fails on is not read
    assert (flight_recorder.load_dump(data, tail=16, whole=False)[0] is not None) == cut


@pytest.mark.parametrize("protocol", [4, 5])
def test_a_memo_bomb_in_the_kept_tail_of_a_re_saved_dump_is_refused(protocol: int) -> None:
    data = _dump(protocol)
    assert data.endswith(b"eu.")  # APPENDS (entries), SETITEMS (top dict), STOP
    bomb = data[:-3] + b"Nr\x00\x00\x00\x400" + data[-3:]  # LONG_BINPUT slot 2**30, in a frame
    for tail in (None, 16):
        dump, why = flight_recorder.load_dump(bomb, tail=tail)
        assert dump is None and why is not None and "memo slot 1073741824" in why


# A tuple nested 300,000 deep (hashing it overflows the C stack) and one whose two items
# are the same tuple, 60 levels down (2**60 items to hash or print): a few bytes of opcodes
# each, put where a dump holds a value (not a key: the C unpickler builds values unhashed).
_DEEP = b")" + b"\x85" * 300_000
_SHARED = b")" + b"2\x86" * 60  # DUP, TUPLE2
_MARK = "MARK_FOR_THE_NESTED_VALUE"


def _with_nested(field: str, nested: bytes, protocol: int) -> bytes:
    """A dump of 6 entries whose third holds `nested` in `field` (top-level `version`)."""
    rows: list[Any] = [fr_entry(seq) for seq in range(1, 7)]
    top: dict[str, Any] = {"version": "2.10", "entries": rows}
    values = {
        "input_sizes": [[_MARK]],
        "input_dtypes": [_MARK],
        "output_sizes": [[_MARK]],
        "output_dtypes": [_MARK],
        "process_group": (_MARK, "default_pg"),
        "frames": [{"name": _MARK, "filename": "train.py", "line": 3}],
    }
    if field == "version":
        top["version"] = _MARK
    else:
        rows[2][field] = values[field]
    data = pickle.dumps(top, protocol=protocol)
    opcodes = [pos for op, arg, pos in pickletools.genops(data) if arg == _MARK]
    assert len(opcodes) == 1
    at = opcodes[0]
    end = at + 1 + (1 if data[at] == 0x8C else 4) + len(_MARK)
    data = data[:at] + nested + data[end:]
    if data[2] == 0x95:  # protocol 4+: the one frame's length says what it now holds
        data = data[:3] + (len(data) - 11).to_bytes(8, "little") + data[11:]
    return data


def _read_elsewhere(data: bytes) -> dict[str, Any]:
    """load_dump in a child process: a crash or a hang fails the test, not the run."""
    code = (
        "import json, sys\n"
        "from triage.parsers.flight_recorder import load_dump\n"
        "warnings = []\n"
        "dump, why = load_dump(sys.stdin.buffer.read(), warnings=warnings)\n"
        "print(json.dumps({'why': why, 'warnings': warnings, 'version': dump and dump.version,"
        " 'entries': dump and [[e.collective_seq_id, e.pg_name, list(e.input_sizes),"
        " list(e.input_dtypes), len(e.frames)] for e in dump.entries]}))\n"
    )
    root = str(Path(flight_recorder.__file__).resolve().parents[3])
    env = {**os.environ, "PYTHONPATH": root}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], input=data, capture_output=True, env=env, timeout=120
        )
    except subprocess.TimeoutExpired:
        pytest.fail("reading the dump did not finish")
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-500:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.parametrize("nested", [_DEEP, _SHARED], ids=["deep", "shared"])
@pytest.mark.parametrize(
    ("field", "said"),
    [
        ("input_sizes", "input_sizes not a list of integer shapes (1x)"),
        ("output_sizes", "output_sizes not a list of integer shapes (1x)"),
        ("output_dtypes", "output_dtypes not a list of strings (1x)"),
        ("input_dtypes", "input_dtypes not a list of strings (1x)"),
        ("process_group", "process_group is not a (name, desc) pair of strings (1x)"),
    ],
)
def test_a_nested_tuple_in_an_entry_skips_that_entry_alone(
    field: str, said: str, nested: bytes, protocol: int
) -> None:
    got = _read_elsewhere(_with_nested(field, nested, protocol))
    assert got["why"] is None
    assert [e[0] for e in got["entries"]] == [1, 2, 4, 5, 6]
    assert any(said in w for w in got["warnings"]), got["warnings"]


@pytest.mark.parametrize("nested", [_DEEP, _SHARED], ids=["deep", "shared"])
def test_a_nested_tuple_in_a_stack_drops_that_stack_alone(nested: bytes) -> None:
    got = _read_elsewhere(_with_nested("frames", nested, 4))
    assert got["why"] is None
    assert [e[4] for e in got["entries"]] == [0, 0, 0, 0, 0, 0]  # fr_entry has no stack
    plain = _read_elsewhere(_with_nested("frames", b"\x8c\x04step", 4))
    assert [e[4] for e in plain["entries"]] == [0, 0, 1, 0, 0, 0]


@pytest.mark.parametrize("nested", [_DEEP, _SHARED], ids=["deep", "shared"])
def test_a_nested_tuple_for_a_version_is_ignored_with_a_warning(nested: bytes) -> None:
    got = _read_elsewhere(_with_nested("version", nested, 4))
    assert got["why"] is None and got["version"] is None
    assert len(got["entries"]) == 6
    assert "version is a tuple, not a string; ignored" in got["warnings"]
