"""Dumps re-saved with Python's pickler at protocols 4-5 are as untrusted as torch's own: a
call, a memo bomb, an out-of-band buffer or a cut anywhere gives a clear message, never code
run, a traceback or a hang."""

from __future__ import annotations

import pickle
import pickletools
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


def _dump(protocol: int, entries: int = 300, extra: Any = None) -> bytes:
    rows: list[Any] = [fr_entry(seq) for seq in range(1, entries + 1)]
    if extra is not None:
        rows.insert(entries // 2, extra)
    return pickle.dumps({"version": "2.10", "entries": rows}, protocol=protocol)


@pytest.mark.parametrize("protocol", [4, 5])
@pytest.mark.parametrize("tail", [None, 16])
def test_a_call_inside_a_re_saved_dump_is_refused_and_never_run(
    protocol: int, tail: int | None, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    data = _dump(protocol, extra={"profiling_name": _Touch(marker)})
    dump, why = flight_recorder.load_dump(data, tail=tail)
    assert dump is None and why is not None
    assert "refused" in why and "imports a global" in why
    assert not marker.exists()


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"\x80\x04]r\x00\xca\x9a\x3b.", "memo slot 1000000000"),  # a 16 GB memo table
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
