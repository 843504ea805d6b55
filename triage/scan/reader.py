"""Reading a binary stream as chunks of whole lines, and walking the lines of a chunk.

Lines are decoded as UTF-8 with replacement, ANSI colour codes are stripped, and `\\r`
progress-bar overwrites are collapsed while any other text sharing the physical line (an error
printed over a tqdm bar, pytorch#118369) is kept. Lines longer than `max_line` bytes keep their
head and tail and say what was cut; memory never holds more than one chunk plus one cut line.
"""

from __future__ import annotations

import io
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from typing import IO, NamedTuple

from triage.scan.engines import CHUNK_SIZE, LineCounter, count_newlines

MAX_LINE = 1 << 20
_MAX_CUT_WARNINGS = 20

_ANSI = re.compile(
    rb"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()][A-Za-z0-9]|[=>])"
)
# A tqdm-style bar segment: `45%|####  | 450/1000 [01:23<...]`, `12.3it/s`, `1.2s/it`.
_BAR = re.compile(rb"\d%\||\d+/\d+ \[|it/s|s/it|\|[#\x80-\xff ]{3,}\|")
_MAX_SEGMENTS = 8


class Line(NamedTuple):
    number: int  # 1-based physical line number
    text: str  # decoded, ANSI stripped, `\r` overwrites collapsed


def clean(raw: bytes) -> list[str]:
    """One physical line -> the logical texts it shows (usually exactly one)."""
    if b"\x1b" in raw:
        raw = _ANSI.sub(b"", raw)
    if b"\x00" in raw:
        raw = raw.replace(b"\x00", b"")
    if b"\r" not in raw:
        return [raw.decode("utf-8", "replace").rstrip()]
    parts = [p for p in raw.split(b"\r") if p.strip()]
    if not parts:
        return [""]
    # Bars overwrite each other: only the last bar is what the terminal showed. Other text on
    # the same physical line (an error logged while the bar was drawn) is kept in order.
    kept = [p for p in parts[:-1] if not _BAR.search(p)][-_MAX_SEGMENTS:]
    kept.append(parts[-1])
    return [p.decode("utf-8", "replace").rstrip() for p in kept]


def clean_last(raw: bytes) -> str:
    """`clean(raw)[-1]`, the text the terminal showed last, without testing the earlier
    segments of a `\r` line for bars (a tqdm line holds dozens of redraws)."""
    if b"\x1b" in raw:
        raw = _ANSI.sub(b"", raw)
    if b"\x00" in raw:
        raw = raw.replace(b"\x00", b"")
    if b"\r" in raw:
        for part in reversed(raw.split(b"\r")):
            if part.strip():
                raw = part
                break
        else:
            return ""
    return raw.decode("utf-8", "replace").rstrip()


# How far past a block's end a plain file is looked at for the end of the block's last line;
# a longer line is carried over to the next block as from any other stream.
_PROBE = 64 << 10


_MALLOC_TUNED = False


def _keep_freed_blocks() -> None:
    """Ask glibc's malloc to keep freed chunk-sized blocks for reuse (once per process).

    By default a freed multi-MiB block goes back to the OS and the next one is mapped again,
    zero-filled page by page: reading a big log in 4 MiB blocks then runs at ~0.7 GB/s
    instead of ~3 GB/s. Raising the mmap and trim thresholds keeps a few blocks' worth of
    freed memory in the heap (peak RSS grows by at most that much). A no-op where the C
    library has no `mallopt` (macOS, musl without it) or refuses.
    """
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED = True
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 4 * CHUNK_SIZE)
    mallopt(_M_TRIM_THRESHOLD, 16 * CHUNK_SIZE)
    # blocks differ in size by their last line, so a freed one is not always reused: the
    # heap grows by a generous step, whose pages stay mapped once touched
    mallopt(_M_TOP_PAD, 16 * CHUNK_SIZE)


# glibc's <malloc.h> parameter numbers
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3


def _plain_file(stream: IO[bytes]) -> int | None:
    """The descriptor of `stream` when it is a buffered regular file read from its start
    (its reads can be looked ahead of with `pread`), else None."""
    if type(stream) is not io.BufferedReader or type(stream.raw) is not io.FileIO:
        return None
    try:
        fd = stream.fileno()
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (OSError, ValueError):
        return None


class ChunkReader:
    """Reads a binary stream as chunks of whole lines: `(data, first_line_number)`.

    `data` ends with a newline except at the end of the stream. A line longer than `max_line`
    is cut to its head and tail (a warning says so), so memory stays bounded.
    """

    def __init__(
        self, stream: IO[bytes], *, chunk_size: int = CHUNK_SIZE, max_line: int = MAX_LINE
    ) -> None:
        self._stream = stream
        self.chunk_size = max(chunk_size, 64)
        self.max_line = max(max_line, 64)
        self.warnings: list[str] = []
        self.bytes_read = 0
        self.lines = 0  # physical lines handed out so far
        self.chunk_newlines = 0  # newlines in the chunk handed out last
        self.counter: LineCounter | None = None  # line numbers of offsets in that chunk
        self._cuts = 0
        # A plain file on disk: each read takes the rest of its last line too (looked up with
        # `pread`, which leaves the position alone), so a block is handed out whole instead
        # of copied once more without its partial line (~10% of a big log's parse).
        self._fd = _plain_file(stream)
        if self._fd is not None and self.chunk_size >= CHUNK_SIZE:
            _keep_freed_blocks()

    def _read(self) -> bytes:
        try:
            size = self.chunk_size
            if self._fd is not None:
                ahead = os.pread(self._fd, _PROBE, self._stream.tell() + size)
                newline = ahead.find(b"\n")
                if newline >= 0:
                    size += newline + 1
            block = self._stream.read(size)
        except Exception as exc:  # a corrupt archive member, a vanished file: stop, say why
            self.warnings.append(f"read failed after {self.bytes_read} bytes: {exc!r}")
            return b""
        if not isinstance(block, (bytes, bytearray)):
            if block:
                self.warnings.append("stream returned text, not bytes; read stopped")
            return b""
        self.bytes_read += len(block)
        return bytes(block)

    def cut_marker(self, line_number: int, length: int) -> bytes:
        self._cuts += 1
        if self._cuts <= _MAX_CUT_WARNINGS:
            self.warnings.append(
                f"line {line_number}: {length} bytes long, cut to its first and last "
                f"{self.max_line // 2} bytes"
            )
        elif self._cuts == _MAX_CUT_WARNINGS + 1:
            self.warnings.append("more over-long lines were cut; not listed")
        return b" ... [cut %d bytes] ... " % max(length - self.max_line, 0)

    def __iter__(self) -> Iterator[tuple[bytes, int]]:
        half = self.max_line // 2
        carry = b""
        while True:
            block = self._read()
            if not block:
                if carry:
                    self.chunk_newlines = 0
                    self.counter = LineCounter(carry, self.lines + 1, 0)
                    yield carry, self.lines + 1
                    self.lines += 1
                return
            last = block.rfind(b"\n")
            if last >= 0:
                # one copy: the carried partial line and the block's whole lines
                data = (
                    b"".join((carry, memoryview(block)[: last + 1])) if carry else block[: last + 1]
                )
                carry = block[last + 1 :]
                first = self.lines + 1
                self.counter = LineCounter(data, first)
                self.chunk_newlines = self.counter.newlines
                self.lines += self.chunk_newlines
                yield data, first
            else:
                carry = carry + block
            if len(carry) > self.max_line:
                # One line bigger than the budget: keep its head and a rolling tail until it ends.
                head, tail, total = carry[:half], carry[-half:], len(carry)
                rest = b""
                while True:
                    block = self._read()
                    if not block:
                        break
                    nl = block.find(b"\n")
                    if nl < 0:
                        total += len(block)
                        tail = (tail + block)[-half:]
                        continue
                    total += nl
                    tail = (tail + block[:nl])[-half:]
                    rest = block[nl + 1 :]
                    break
                number = self.lines + 1
                line = head + self.cut_marker(number, total) + tail
                self.lines += 1
                self.chunk_newlines = 1
                line += b"\n"
                self.counter = LineCounter(line, number, 1)
                yield line, number
                carry = rest
                last = carry.rfind(b"\n")
                if last >= 0:  # the rest of that block may hold whole lines
                    data, carry = carry[: last + 1], carry[last + 1 :]
                    first = self.lines + 1
                    self.counter = LineCounter(data, first)
                    self.chunk_newlines = self.counter.newlines
                    self.lines += self.chunk_newlines
                    yield data, first


def line_text(reader: ChunkReader, raw: bytes, number: int) -> list[str]:
    """Decode one physical line, cutting it first when it is over the budget."""
    if len(raw) > reader.max_line:
        half = reader.max_line // 2
        raw = raw[:half] + reader.cut_marker(number, len(raw)) + raw[-half:]
    return clean(raw)


def iter_lines(
    stream: IO[bytes],
    *,
    chunk_size: int = CHUNK_SIZE,
    max_line: int = MAX_LINE,
    reader: ChunkReader | None = None,
) -> Iterator[Line]:
    """Every line of `stream`, decoded and cleaned (a `\\r` line may give several texts)."""
    reader = reader or ChunkReader(stream, chunk_size=chunk_size, max_line=max_line)
    for data, first in reader:
        raws = data.split(b"\n")
        if raws and not raws[-1]:
            raws.pop()
        for i, raw in enumerate(raws):
            number = first + i
            for text in line_text(reader, raw, number):
                yield Line(number, text)


# --------------------------------------------------------------------------- marker scan


def select_lines(
    data: bytes,
    first_line: int,
    offsets: list[int],
    dense: Callable[[], bool],
    counter: LineCounter | None = None,
) -> Iterator[tuple[int, bytes]]:
    """The lines of `data` that hold an offset, plus every line while `dense()` is true.

    Yields `(line_number, raw_line)`; `dense` is asked again before each step, so a caller can
    switch to reading every line when a multi-line record opens and back when it closes.
    A `counter` for `data` numbers lines counting from the chunk's nearer end (the lines of a
    crash sit at a log's head and tail), else newlines are counted from the chunk's start.
    """
    counter = counter or LineCounter(data, first_line, count_newlines(data))
    for number, start, end in select_spans(data, offsets, dense, counter):
        yield (counter.number_at(start) if number is None else number), data[start:end]


def select_spans(
    data: bytes,
    offsets: list[int],
    dense: Callable[[], bool],
    counter: LineCounter,
    pos: int = 0,
) -> Iterator[tuple[int | None, int, int]]:
    """`select_lines` as `(line_number, start, end)` spans, from byte `pos` (a line start; a
    caller that re-scans the rest of a chunk continues there). A line found by its offset
    comes with None for its number, `counter.number_at(start)` when the caller needs it: a
    line whose verdict is known without parsing it (a repeat) never pays for the count."""
    n = len(data)
    number: int | None = None  # the number of the line at `pos`, when known
    i = 0
    k = len(offsets)
    while pos < n:
        if dense():
            start = pos
            if number is None:
                number = counter.number_at(start)
        else:
            while i < k and offsets[i] < pos:
                i += 1
            if i >= k:
                return
            start = max(pos, data.rfind(b"\n", pos, offsets[i]) + 1)
            if start > pos:
                number = None
        end = data.find(b"\n", start)
        if end < 0:
            end = n
        yield number, start, end
        pos = end + 1
        number = None if number is None else number + 1
