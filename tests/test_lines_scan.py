"""The chunk helpers behind the fast log path: newline counts, line numbers, marker scans."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scan_engines import ENGINES

from triage.parsers import rank_log
from triage.scan import engines, reader
from triage.scan.markers import MarkerSet

# Text long enough that both counting branches (bytes.count, numpy) run.
_texts = st.lists(st.sampled_from([b"a", b"\n", b"xyz ", b"\n\n", b"q" * 5000]), max_size=60).map(
    b"".join
)


@settings(max_examples=60, deadline=None)
@given(_texts, st.integers(-10, 400_000), st.integers(-10, 400_000))
def test_count_newlines_is_bytes_count(data: bytes, a: int, b: int) -> None:
    start, end = sorted((max(a, 0), max(b, 0)))
    assert engines.count_newlines(data, start, end) == data.count(b"\n", start, end)
    assert engines.count_newlines(data) == data.count(b"\n")


@settings(max_examples=60, deadline=None)
@given(_texts, st.lists(st.integers(0, 400_000), max_size=20), st.integers(1, 1000))
def test_line_counter_numbers_offsets_asked_in_any_order(
    data: bytes, asks: list[int], first: int
) -> None:
    counter = engines.LineCounter(data, first)
    for pos in asks:
        pos = min(pos, len(data))
        assert counter.number_at(pos) == first + data.count(b"\n", 0, pos)


@settings(max_examples=60, deadline=None)
@given(_texts, st.lists(st.integers(0, 400_000), max_size=30))
def test_select_lines_numbers_lines_the_same_with_a_counter(data: bytes, offs: list[int]) -> None:
    offsets = sorted(min(o, max(len(data) - 1, 0)) for o in offs)
    plain = list(reader.select_lines(data, 7, offsets, lambda: False))
    counted = list(
        reader.select_lines(data, 7, offsets, lambda: False, engines.LineCounter(data, 7))
    )
    assert counted == plain
    for number, raw in plain:
        assert data.split(b"\n")[number - 7] == raw


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [b"Step 3", b"EPOCH", b"it/s", b"iteration", b"\n", b"x", b" ", b"Traceback", b"\xff"]
        ),
        max_size=40,
    ).map(b"".join)
)
def test_every_engine_finds_the_lines_a_plain_search_finds(engine: str, data: bytes) -> None:
    for markers in (rank_log.scan_tables().markers, rank_log.PROGRESS_MARKERS):
        scan = markers.using(engine)
        plain = markers.find_plain(data)
        line_of = lambda offs: sorted({data.rfind(b"\n", 0, o) for o in offs})  # noqa: E731
        assert line_of(scan.find(data)) == line_of(plain)
        ends = {data.find(b"\n", o) for o in plain}
        assert scan.line_ends(data) == sorted(e if e >= 0 else len(data) for e in ends)
        assert scan.contains(data) == bool(plain)


def test_an_unknown_engine_is_refused() -> None:
    with pytest.raises(ValueError):
        MarkerSet(["step"], engine="grep")


def test_without_hyperscan_the_numpy_scan_stands_in() -> None:
    # a fresh interpreter in which `import hyperscan` fails, as where no wheel installs
    script = """
import sys
sys.modules["hyperscan"] = None
from triage.scan.markers import MarkerSet
markers = MarkerSet(["step", "epoch"])
print(markers.engine)
print(markers.find(b"x\\nStep 3\\nno\\nepoch=2\\n"))
print(markers.line_ends(b"x\\nStep 3\\nno\\nepoch=2"))
try:
    MarkerSet(["step"], engine="hyperscan").find(b"step step")
except ImportError:
    print("hyperscan refused")
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    ).stdout.splitlines()
    assert out == ["numpy", "[2, 12]", "[8, 19]", "hyperscan refused"]


_file_texts = st.lists(
    st.sampled_from([b"step 1\n", b"\n", b"x" * 70_000, b"tail", b"y" * 300 + b"\n"]),
    max_size=40,
).map(b"".join)


@settings(max_examples=40, deadline=None)
@given(_file_texts, st.sampled_from([64, 1000, 65_536]))
def test_a_file_on_disk_reads_as_the_same_chunks_of_whole_lines_as_a_stream(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, chunk: int
) -> None:
    import io

    path = tmp_path_factory.mktemp("chunks") / "rank_0.log"
    path.write_bytes(data)
    with path.open("rb") as fh:  # a plain file: blocks end where their last line ends
        from_file = list(reader.ChunkReader(fh, chunk_size=chunk, max_line=1 << 20))
    from_stream = list(reader.ChunkReader(io.BytesIO(data), chunk_size=chunk, max_line=1 << 20))
    for got in (from_file, from_stream):
        assert b"".join(block for block, _ in got) == data
        assert all(block.endswith(b"\n") for block, _ in got[:-1])
        at = 0
        for block, first in got:  # each block's first line number is right
            assert first == data.count(b"\n", 0, at) + 1
            at += len(block)
