"""The optional accelerators of the scan (numpy, hyperscan), imported on first use, and newline
counting with them.

Both are optional at run time: without hyperscan the numpy scan gives the same lines, without
numpy the plain-bytes scan does. Each is imported the first time a big chunk needs it, since
importing them costs a large share of `triage explain`'s start-up.
"""

from __future__ import annotations

import threading
from typing import Any

_np: Any = None  # numpy, imported on the first big scan (pasted text never needs it)
_NUMPY_TRIED = False


def numpy_module() -> Any:
    """numpy makes the marker scan ~3x faster; the plain-bytes fallback gives the same result.

    Imported on first use: it costs ~0.2 s, a large share of `triage explain`'s start-up.
    """
    global _np, _NUMPY_TRIED
    if not _NUMPY_TRIED:
        _NUMPY_TRIED = True
        try:
            import numpy
        except ImportError:  # pragma: no cover - numpy is a dependency
            numpy = None
        _np = numpy
    return _np


_hs: Any = None  # hyperscan, imported on the first big scan; None where no wheel installs
_HS_TRIED = False


def hyperscan_module() -> Any:
    """hyperscan scans a chunk for all markers at GB/s; without it numpy gives the same answer."""
    global _hs, _HS_TRIED
    if not _HS_TRIED:
        _HS_TRIED = True
        try:
            import hyperscan
        except ImportError:  # no wheel for this platform: the numpy scan stands in
            hyperscan = None
        _hs = hyperscan
    return _hs


CHUNK_SIZE = 4 << 20  # the reader's block; the newline count's buffer is sized for it

# Below this many bytes `bytes.count` beats numpy's per-call overhead.
_NUMPY_COUNT_MIN = 32 << 10
_COUNT_LOCAL = threading.local()


def _newline_mask(data: bytes, start: int, end: int) -> Any:
    """A bool array, True at each `\\n` of data[start:end], in a buffer kept between calls: a
    fresh temporary's page faults cost more than the compare."""
    np = _np
    size = end - start
    buf = getattr(_COUNT_LOCAL, "buf", None)
    if buf is None or len(buf) < size:
        buf = _COUNT_LOCAL.buf = np.empty(max(size, CHUNK_SIZE + (64 << 10)), bool)
    out = buf[:size]
    np.equal(np.frombuffer(data, np.uint8, size, start), 10, out=out)
    return out


def count_newlines(data: bytes, start: int = 0, end: int | None = None) -> int:
    """`data.count(b"\\n", start, end)`; numpy counts big spans ~5x faster."""
    n = len(data)
    end = n if end is None else min(max(end, 0), n)
    start = min(max(start, 0), end)
    if end - start < _NUMPY_COUNT_MIN or numpy_module() is None:
        return data.count(b"\n", start, end)
    return int(_np.count_nonzero(_newline_mask(data, start, end)))


def scratch(local: threading.local, database: Any) -> Any:
    """The calling thread's hyperscan scratch for a database (kept in `local`): one scratch
    serves one scan at a time."""
    scratches = getattr(local, "scratches", None)
    if scratches is None:
        scratches = local.scratches = {}
    scratch = scratches.get(id(database))
    if scratch is None:
        scratch = scratches[id(database)] = _hs.Scratch(database)
    return scratch


class LineCounter:
    """Line numbers of offsets in one chunk, counted from the nearest offset already known.

    Built without `newlines`, it counts the chunk's newlines (one vectorised pass); the first
    time an offset lies far from every known one, it also indexes the newlines of each ~2 KiB
    block, so any offset is then at most 1 KiB of counting away. Offsets asked in order
    (samples, candidate lines) count from the offset asked last. Most chunks of a big log never
    ask for a far line number (its hot lines are repeats), so most never pay for the index.
    """

    # 255 eight-byte words: summing the newline mask as words keeps each byte lane <= 255
    _WORDS = 255
    _BLOCK = _WORDS * 8
    # the index is built at the first line number asked this far from every known offset: a
    # chunk that asks one far away (a new line, a record) mostly asks more
    _FAR = 64 << 10

    def __init__(self, data: bytes, first_line: int, newlines: int | None = None) -> None:
        self._data = data
        self._first = first_line
        self._blocks: list[int] | None = None  # newlines before each block boundary
        # whether the block index may still be built (a chunk big enough to need one)
        self._indexable = len(data) >= 16 * self._BLOCK
        if newlines is None:
            newlines = count_newlines(data)
        self.newlines = newlines
        self._end = (len(data), first_line + newlines)
        self._last = (0, first_line)

    def _index(self) -> None:
        self._indexable = False
        np = numpy_module()
        data = self._data
        if np is None:  # pragma: no cover - numpy is a dependency
            return
        n = len(data)
        whole = n // self._BLOCK * self._BLOCK
        mask = _newline_mask(data, 0, whole)
        # Each word holds 8 mask bytes (0 or 1); 255 of them summed leave each byte lane
        # <= 255, and the 8 lanes of that sum add up to the block's newlines: one fast pass.
        words = mask.view(np.uint64).reshape(-1, self._WORDS).sum(axis=1)
        sums = words.view(np.uint8).reshape(-1, 8).sum(axis=1, dtype=np.int64)
        self._blocks = [0, *np.cumsum(sums).tolist()]

    def number_at(self, pos: int) -> int:
        """The 1-based number of the line holding byte `pos` (0 <= pos <= len(data))."""
        at, number = self._last
        if pos < abs(at - pos):
            at, number = 0, self._first
        if abs(self._end[0] - pos) < abs(at - pos):
            at, number = self._end
        if self._indexable and abs(at - pos) > self._FAR:
            self._index()
        if self._blocks is not None:
            k = min((pos + self._BLOCK // 2) // self._BLOCK, len(self._blocks) - 1)
            if abs(k * self._BLOCK - pos) < abs(at - pos):
                at, number = k * self._BLOCK, self._first + self._blocks[k]
        if pos >= at:
            number += count_newlines(self._data, at, pos)
        else:
            number -= count_newlines(self._data, pos, at)
        self._last = (pos, number)
        return number
