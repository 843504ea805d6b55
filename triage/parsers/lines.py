"""Bounded, fast streaming of text lines out of a binary stream.

Logs are read in big binary chunks holding whole lines. Only lines that matter are decoded:
`MarkerSet` finds candidate lines for a whole chunk at once (hyperscan's SIMD multi-literal
matcher where its wheel is installed, else a vectorised 4-byte hash in numpy and an exact check
per hit), and `select_lines` walks only those lines, or every line while the caller asks for it
(inside a traceback). Lines are decoded as UTF-8 with replacement,
ANSI colour codes are stripped, and `\\r` progress-bar overwrites are collapsed while any other
text sharing the physical line (an error printed over a tqdm bar, pytorch#118369) is kept.
Lines longer than `max_line` bytes keep their head and tail and say what was cut; memory never
holds more than one chunk plus one cut line.
"""

from __future__ import annotations

import io
import os
import re
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, NamedTuple

from triage.parsers import hs_cache

_np: Any = None  # numpy, imported on the first big scan (pasted text never needs it)
_NUMPY_TRIED = False


def _numpy() -> Any:
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


def _hyperscan() -> Any:
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


def hyperscan_module() -> Any:
    """The hyperscan module, or None where no wheel installs."""
    return _hyperscan()


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
    if end - start < _NUMPY_COUNT_MIN or _numpy() is None:
        return data.count(b"\n", start, end)
    return int(_np.count_nonzero(_newline_mask(data, start, end)))


def _scratch(local: threading.local, database: Any) -> Any:
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

    Built without `newlines`, it counts the chunk's newlines once per ~2 KiB block, so any
    offset is at most 1 KiB of counting away; offsets asked in order (samples, candidate lines)
    also count from the offset asked last.
    """

    # 255 eight-byte words: summing the newline mask as words keeps each byte lane <= 255
    _WORDS = 255
    _BLOCK = _WORDS * 8

    def __init__(self, data: bytes, first_line: int, newlines: int | None = None) -> None:
        self._data = data
        self._first = first_line
        self._blocks: list[int] | None = None  # newlines before each block boundary
        if newlines is None:
            newlines = self._index() if len(data) >= 16 * self._BLOCK else data.count(b"\n")
        self.newlines = newlines
        self._end = (len(data), first_line + newlines)
        self._last = (0, first_line)

    def _index(self) -> int:
        np = _numpy()
        data = self._data
        if np is None:  # pragma: no cover - numpy is a dependency
            return data.count(b"\n")
        n = len(data)
        whole = n // self._BLOCK * self._BLOCK
        mask = _newline_mask(data, 0, n)
        # Each word holds 8 mask bytes (0 or 1); 255 of them summed leave each byte lane
        # <= 255, and the 8 lanes of that sum add up to the block's newlines: one fast pass.
        words = mask[:whole].view(np.uint64).reshape(-1, self._WORDS).sum(axis=1)
        sums = words.view(np.uint8).reshape(-1, 8).sum(axis=1, dtype=np.int64)
        self._blocks = [0, *np.cumsum(sums).tolist()]
        return self._blocks[-1] + int(np.count_nonzero(mask[whole:]))

    def number_at(self, pos: int) -> int:
        """The 1-based number of the line holding byte `pos` (0 <= pos <= len(data))."""
        at, number = self._last
        if self._blocks is not None:
            k = min((pos + self._BLOCK // 2) // self._BLOCK, len(self._blocks) - 1)
            if abs(k * self._BLOCK - pos) < abs(at - pos):
                at, number = k * self._BLOCK, self._first + self._blocks[k]
        elif pos < abs(at - pos):
            at, number = 0, self._first
        if abs(self._end[0] - pos) < abs(at - pos):
            at, number = self._end
        if pos >= at:
            number += count_newlines(self._data, at, pos)
        else:
            number -= count_newlines(self._data, pos, at)
        self._last = (pos, number)
        return number


CHUNK_SIZE = 4 << 20
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


def _fold4(b: bytes) -> int:
    """The case-folded little-endian code of 4 bytes (`| 0x20` folds ASCII letters)."""
    return int.from_bytes(b[:4], "little") | 0x20202020


# Bytes from common to rare in log text; anything not listed counts as fairly rare.
_COMMONNESS = b" etaoinsrlcdhu0123456789mpfgwybvkxzjq"
# 4-byte windows that training logs (or English) repeat on nearly every line: never an anchor
_BUSY_WINDOWS = frozenset(
    b"rank step time loss info node iter poch grad batc with work comp devi modu turn foun "
    b"scal load read from that this have will data tion ment ents pute proc conf able memo "
    b"mory".split()
)


def _anchor(needle: bytes, busy: frozenset[bytes] = frozenset()) -> int:
    """Offset of the needle's rarest 4-byte window: hits on common windows cost time. `busy`
    windows (those of a caller's ordinary lines) count as the commonest."""

    def rarity(window: bytes) -> int:
        if window in _BUSY_WINDOWS or window in busy:
            return -1
        return sum(_COMMONNESS.find(c) if c in _COMMONNESS else 20 for c in window)

    scores = [(rarity(needle[i : i + 4]), i) for i in range(len(needle) - 3)]
    return max(scores)[1]


class MarkerSet:
    """Finds every occurrence of a set of case-insensitive markers in a chunk, fast.

    `needles` are ASCII strings of 4+ characters matched case-insensitively. `engine` picks
    the scan: "hyperscan" (a SIMD multi-literal automaton, ~2 GB/s), "numpy" (hashes every
    4-byte window of the chunk, keeps windows whose hash is a marker's, drops hash collisions
    with an exact vectorised compare and checks each remaining hit's whole needle in Python;
    a `|` in a needle marks where its 4-byte window starts, else the rarest window is taken),
    or "auto": hyperscan where it is installed, else numpy. Every engine finds the same lines.
    """

    _BITS = 17  # measured: fewer collisions pay for a table that no longer fits L1
    ENGINES = ("auto", "hyperscan", "numpy")

    def __init__(
        self, needles: Iterable[str], *, engine: str = "auto", ordinary: Iterable[str] = ()
    ) -> None:
        if engine not in self.ENGINES:
            raise ValueError(f"unknown marker engine {engine!r}")
        self._spec = list(needles)
        self._engine = engine
        # Lines the scan mostly sees (healthy progress output): no anchor window is taken from
        # them when a needle has another, or the numpy engine would check every such line.
        self._ordinary = list(ordinary)
        self._hs_find: Any = None  # hyperscan databases, compiled on the first scan
        self._hs_lines: Any = None
        self._hs_line_groups = 0
        self._hs_lens: list[int] = []
        needles = []
        for needle in self._spec:
            raw = needle.lower().encode("ascii")
            bar = raw.find(b"|")
            raw = raw.replace(b"|", b"")
            if len(raw) < 4 or bar > len(raw) - 4:
                raise ValueError(f"marker {needle!r} is shorter than 4 bytes after its anchor")
            needles.append(raw)
        self._needles = sorted(set(needles))
        # 4-byte code -> (needle, offset of the code inside it): the numpy engine's anchors,
        # chosen on its first use (~0.1 s of start-up that hyperscan never needs)
        self._anchors: dict[int, list[tuple[bytes, int]]] | None = None
        self._table = self._codes = None  # built on the first `find` (see _numpy)
        self._local = threading.local()  # per-thread scratch buffers

    @property
    def _by_code(self) -> dict[int, list[tuple[bytes, int]]]:
        if self._anchors is None:
            busy = frozenset(
                low[i : i + 4]
                for line in self._ordinary
                for low in (line.lower().encode("utf-8", "replace"),)
                for i in range(len(low) - 3)
            )
            anchors: dict[int, list[tuple[bytes, int]]] = {}
            for needle in self._spec:
                # `usin|g network`: the anchor window starts at the bar; else the rarest one
                raw = needle.lower().encode("ascii")
                bar = raw.find(b"|")
                raw = raw.replace(b"|", b"")
                off = bar if bar >= 0 else _anchor(raw, busy)
                anchors.setdefault(_fold4(raw[off : off + 4]), []).append((raw, off))
            self._anchors = anchors
        return self._anchors

    def using(self, engine: str) -> MarkerSet:
        """The same markers scanned by another engine (tests compare them)."""
        return MarkerSet(self._spec, engine=engine, ordinary=self._ordinary)

    @property
    def engine(self) -> str:
        """The engine `find` runs on: "hyperscan", "numpy" or "plain" (neither installed)."""
        if self._engine != "numpy" and self._hyperscan_ready():
            return "hyperscan"
        return "numpy" if _numpy() is not None else "plain"

    def _hyperscan_ready(self) -> bool:
        """Whether `find` runs on hyperscan; compiles its database on the first call."""
        if self._hs_find is not None:
            return True
        if self._engine == "numpy":
            return False
        hs = _hyperscan()
        if hs is None:
            if self._engine == "hyperscan":
                raise ImportError("hyperscan is not installed")
            return False
        # reports each needle's end: a literal's start is its end minus its length
        found = hs_cache.database(
            hs,
            self._needles,
            list(range(len(self._needles))),
            hs.HS_FLAG_CASELESS,
            literal=True,
        )
        self._hs_lens = [len(n) for n in self._needles]
        self._hs_find = found
        return True

    def _line_database(self) -> Any:
        """A database reporting the end of each line holding any needle, once per line
        (compiled apart: it costs ~10x the literal one and most sets never need it)."""
        if self._hs_lines is None:
            hs = _hs
            escaped = [
                b"".join(bytes([c]) if chr(c).isalnum() else b"\\x%02x" % c for c in needle)
                for needle in self._needles
            ]
            # hyperscan limits one expression's length: the needles go in groups of a few
            groups = [escaped[i : i + 64] for i in range(0, len(escaped), 64)]
            lines = hs_cache.database(
                hs,
                [b"(?:" + b"|".join(g) + b")[^\\n]*$" for g in groups],
                list(range(len(groups))),
                hs.HS_FLAG_CASELESS | hs.HS_FLAG_MULTILINE,
            )
            self._hs_lines = lines
            self._hs_line_groups = len(groups)
        return self._hs_lines

    def _build_table(self) -> None:
        np = _numpy()
        if np is None or self._table is not None:
            return
        table = np.zeros(1 << self._BITS, dtype=bool)
        for code in self._by_code:
            table[self._hash_int(code)] = True
        self._codes = np.array(sorted(self._by_code), dtype=np.uint32)
        self._table = table

    def _buffers(self, size: int) -> tuple[Any, Any, Any]:
        got = getattr(self._local, "buffers", None)
        if got is None or len(got[0]) < size:
            np = _np
            got = (np.empty(size, np.uint32), np.empty(size, np.intp), np.empty(size, bool))
            self._local.buffers = got
        return got

    @classmethod
    def _hash_int(cls, code: int) -> int:
        return ((code * 2654435761) & 0xFFFFFFFF) >> (32 - cls._BITS)

    def _check(self, data: bytes, pos: int) -> int:
        """Start of the needle whose anchor sits at `pos`, or -1."""
        for needle, off in self._by_code.get(_fold4(data[pos : pos + 4]), ()):
            start = pos - off
            if start >= 0 and data[start : start + len(needle)].lower() == needle:
                return start
        return -1

    def find(self, data: bytes) -> list[int]:
        """Sorted start offsets of marker hits in `data` (at least one in each line holding a
        marker; the hyperscan engine gives every occurrence, like `find_plain`)."""
        if len(data) < 4:
            return []
        if self._engine != "numpy" and self._hyperscan_ready():
            out: list[int] = []
            add = out.append
            lens = self._hs_lens

            def on_match(i: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
                add(end - lens[i])

            found = self._hs_find
            found.scan(data, match_event_handler=on_match, scratch=_scratch(self._local, found))
            out.sort()
            return out
        return self._find_numpy(data)

    def line_ends(self, data: bytes) -> list[int]:
        """Sorted end offsets (the `\\n`, or `len(data)`) of the lines holding a marker."""
        if len(data) < 4:
            return []
        if self._engine != "numpy" and self._hyperscan_ready():
            out: list[int] = []
            add = out.append

            def on_line(_i: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
                add(end)

            lines = self._line_database()
            lines.scan(data, match_event_handler=on_line, scratch=_scratch(self._local, lines))
            if self._hs_line_groups == 1:
                return out  # one pattern: hyperscan reports in order of end offset
            return sorted(set(out))  # a line with needles of several groups: once
        n = len(data)
        ends = {data.find(b"\n", hit) for hit in self._find_numpy(data)}
        if -1 in ends:
            ends.discard(-1)
            ends.add(n)
        return sorted(ends)

    def _find_numpy(self, data: bytes) -> list[int]:
        self._build_table()
        if self._table is None or self._codes is None:
            return self.find_plain(data)
        np = _np
        fold = np.uint32(0x20202020)
        mult = np.uint32(2654435761)
        shift = np.uint32(32 - self._BITS)
        codes = self._codes
        found = []
        # in-place arithmetic into buffers kept between chunks: fresh temporaries (and their
        # page faults) cost more than the math
        hashed_all, index_all, marked_all = self._buffers(len(data) // 4 + 1)
        for k in range(4):
            count = (len(data) - k) // 4
            if count <= 0:
                continue
            words = np.frombuffer(data, dtype="<u4", offset=k, count=count)
            hashed = hashed_all[:count]
            np.bitwise_or(words, fold, out=hashed)
            hashed *= mult
            hashed >>= shift
            marked = marked_all[:count]
            index = index_all[:count]
            index[...] = hashed
            np.take(self._table, index, out=marked, mode="clip")
            hits = np.flatnonzero(marked)
            if hits.size:
                # drop hash collisions: the window must be one of the codes exactly
                values = words[hits] | fold
                at = np.searchsorted(codes, values)
                np.minimum(at, len(codes) - 1, out=at)
                hits = hits[codes[at] == values]
                if hits.size:
                    found.append(hits * 4 + k)
        check = self._check
        out = [check(data, p) for p in np.concatenate(found).tolist()] if found else []
        return sorted(p for p in out if p >= 0)

    def contains(self, data: bytes) -> bool:
        """Whether `data` (a line) holds a marker."""
        if len(data) <= 512 and len(self._needles) <= 8:
            low = data.lower()  # a few `in` tests beat a scan's set-up on a short line
            return any(needle in low for needle in self._needles)
        if self._engine != "numpy" and self._hyperscan_ready():
            return bool(self.find(data))
        return bool(self.find_plain(data))

    def find_plain(self, data: bytes) -> list[int]:
        """Same answer as `find` by plain substring search: cheaper for a single line."""
        low = data.lower()
        out: list[int] = []
        for needle in self._needles:
            i = low.find(needle)
            while i >= 0:
                out.append(i)
                i = low.find(needle, i + 1)
        return sorted(p for p in out if p >= 0)


class Gate(NamedTuple):
    """A cheap test of a whole chunk: the patterns behind it are scanned for only where it
    holds. `literal` must occur in the chunk (a `bytes.find`), and, when `words` are given,
    one of them too (case-insensitive; a small literal scan that stops at the first hit)."""

    literal: bytes
    words: tuple[bytes, ...] = ()


class Gated(NamedTuple):
    """Verdict and once patterns (as for `HotLines`) that only a chunk passing `gate` needs."""

    gate: Gate
    verdicts: tuple[bytes, ...] = ()
    once: tuple[bytes, ...] = ()
    # (prefix, words): a line where one of `words` (any case) follows `prefix`, the verdict
    # `prefix[^\n]*(?i:word|...)` without following `prefix` to the end of each of its lines
    # (~250 MB/s where it is on every line): the words are literals of the scan and each line
    # holding one is checked for `prefix` before it
    after: tuple[bytes, tuple[bytes, ...]] | None = None

    def patterns(self) -> tuple[bytes, ...]:
        """The verdicts, `after` as the one pattern it stands for (the plain engine's)."""
        if self.after is None:
            return self.verdicts
        return (*self.verdicts, _after_pattern(self.after))


def _after_pattern(after: tuple[bytes, tuple[bytes, ...]]) -> bytes:
    prefix, words = after
    return re.escape(prefix) + rb"[^\n]*(?i:" + b"|".join(map(re.escape, words)) + rb")"


class HotLines:
    """The lines of a chunk that can make an event, found in one compiled pass.

    A line is hot when it holds a `strong` needle (case-insensitive literals: a template's, a
    rule's, a record opener's) or matches a `verdicts` pattern (byte regexes in the syntax
    hyperscan and `re` share: the error and warning words with their word boundaries, a log
    level, an NCCL line the tracker keeps). Generic words (`error`, `failed`, `warn`, `NCCL `)
    are no needles here: their verdict is the exact pattern, so a near miss (`errors=0`,
    `failed_steps`, `NCCL_ASYNC_ERROR_HANDLING`) costs nothing after the scan. `once` patterns
    report only their first line of each chunk (NCCL channel lines: the tracker keeps one per
    transport).

    `gated` groups are patterns only some chunks need (those holding an ANSI escape, those
    holding NCCL INFO lines): a pattern that follows a busy literal to the end of its line
    (`NCCL INFO[^\n]*(?i:error|...)`) slows the whole scan ~10x on a chunk where that literal
    is on every line, and a gate's test costs a pass of its own (~1.4 GB/s for `in`). So the
    main scan also looks for each gate's literal (reported once), and only a chunk that holds
    it is scanned again for that group's patterns (after its `words` test, if it has one).

    On hyperscan each scan is one database; without it the `markers` scan finds the candidate
    lines and each is checked with `re` (the same lines, slower).
    """

    def __init__(
        self,
        markers: MarkerSet,
        strong: Iterable[str],
        verdicts: Iterable[bytes],
        once: Iterable[bytes] = (),
        gated: Iterable[Gated] = (),
    ) -> None:
        self._markers = markers
        self._strong = sorted({n.lower().encode("ascii") for n in strong})
        self._verdicts = list(verdicts)
        self._once = list(once)
        self._gated = list(gated)
        # the main database and one per gated group: (database, ids of each pattern)
        self._hs_main: tuple[Any, dict[bytes, list[int]]] | None = None
        self._hs_groups: dict[int, tuple[Any, dict[bytes, list[int]]]] = {}
        self._gate_ids: dict[int, int] = {}  # main database id of a gate literal -> group
        self._word_dbs: dict[int, Any] = {}
        self._after_ids: dict[int, dict[int, int]] = {}  # group -> {id of a word: its length}
        self._local = threading.local()
        # the fallback: one `re` per kind, run on a candidate line only; compiled on first use
        # (~0.2 s of start-up that hyperscan never needs)
        self._plain: tuple[re.Pattern[bytes], dict[bytes, re.Pattern[bytes]]] | None = None

    def _plain_res(self) -> tuple[re.Pattern[bytes], dict[bytes, re.Pattern[bytes]]]:
        if self._plain is None:
            strong = re.compile(b"|".join(map(re.escape, self._strong)) or b"(?!)", re.I)
            patterns = [*self._verdicts, *self._once]
            patterns += [p for g in self._gated for p in (*g.patterns(), *g.once)]
            self._plain = strong, {p: re.compile(p) for p in patterns}
        return self._plain

    def _words_pass(self, index: int, data: bytes) -> bool:
        """Whether `data` holds one of group `index`'s gate words (True if it has none)."""
        words = self._gated[index].gate.words
        if not words:
            return True
        if _hyperscan() is None:
            low = data.lower()  # the plain engine: slow anyway
            return any(w.lower() in low for w in words)
        db = self._word_dbs.get(index)
        if db is None:
            db = self._word_dbs[index] = hs_cache.database(
                _hs,
                [_escaped(w) for w in words],
                list(range(len(words))),
                [_hs.HS_FLAG_CASELESS | _hs.HS_FLAG_SINGLEMATCH] * len(words),
            )
        try:
            db.scan(data, match_event_handler=lambda *_: True, scratch=_scratch(self._local, db))
        except _hs.ScanTerminated:  # the handler stops the scan at the first word found
            return True
        return False

    @staticmethod
    def _compile(
        groups: list[tuple[list[bytes], int]],
    ) -> tuple[Any, dict[bytes, list[int]]]:
        """One database of (patterns, flags) groups, and the ids of each pattern."""
        expressions = [p for patterns, _ in groups for p in patterns]
        flags = [f for patterns, f in groups for _ in patterns]
        db = hs_cache.database(_hs, expressions, list(range(len(expressions))), flags)
        ids: dict[bytes, list[int]] = {}
        for i, pattern in enumerate(expressions):
            ids.setdefault(pattern, []).append(i)
        return db, ids

    def _main(self) -> tuple[Any, dict[bytes, list[int]]]:
        if self._hs_main is None:
            hs = _hyperscan()
            gates = [_escaped(g.gate.literal) for g in self._gated]
            self._hs_main = self._compile(
                [
                    ([*map(_escaped, self._strong)], hs.HS_FLAG_CASELESS),
                    (self._verdicts, 0),
                    (self._once, hs.HS_FLAG_SINGLEMATCH),
                    (gates, hs.HS_FLAG_SINGLEMATCH),
                ]
            )
            first = len(self._strong) + len(self._verdicts) + len(self._once)
            self._gate_ids = {first + i: i for i in range(len(gates))}
        return self._hs_main

    def _group(self, index: int) -> tuple[Any, dict[bytes, list[int]]]:
        got = self._hs_groups.get(index)
        if got is None:
            group = self._gated[index]
            words = list(group.after[1]) if group.after else []
            got = self._hs_groups[index] = self._compile(
                [
                    (list(group.verdicts), 0),
                    (list(group.once), _hs.HS_FLAG_SINGLEMATCH),
                    ([*map(_escaped, words)], _hs.HS_FLAG_CASELESS),
                ]
            )
            first = len(group.verdicts) + len(group.once)
            self._after_ids[index] = {first + j: len(w) for j, w in enumerate(words)}
        return got

    def warm(self, groups: Iterable[int] = ()) -> None:
        """Compile the hyperscan databases now (before worker processes fork): the main one
        and those of `groups` (indexes into `gated`)."""
        if _hyperscan() is not None and self._markers.engine == "hyperscan":
            self._main()
            for i in groups:
                self._group(i)

    def find(
        self,
        data: bytes,
        mute: frozenset[bytes] = frozenset(),
        skipped: list[int] | None = None,
        muted_out: list[int] | None = None,
    ) -> list[int]:
        """Sorted offsets, at least one inside each hot line of `data`. `mute`: verdict
        patterns that make no line hot (a line they match is hot only by another pattern);
        `skipped[0]` is raised by the matches they had, or, with `muted_out`, an offset inside
        each line they matched is added to it instead (sorted): a caller that mutes them part
        way through the chunk needs no second scan."""
        if len(data) < 4:
            return []
        if _hyperscan() is None or self._markers.engine != "hyperscan":
            return self.find_plain(data, mute, skipped, muted_out)
        out: list[int] = []
        db, ids = self._main()
        gates = self._scan(db, ids, data, mute, skipped, out, self._gate_ids, muted_out)
        for index in sorted(gates):
            if self._words_pass(index, data):
                group_db, group_ids = self._group(index)
                after = self._gated[index].after
                if after is None:
                    self._scan(group_db, group_ids, data, mute, skipped, out, {}, muted_out)
                    continue
                words: list[tuple[int, int]] = []
                self._scan(
                    group_db,
                    group_ids,
                    data,
                    mute,
                    skipped,
                    out,
                    {},
                    muted_out,
                    self._after_ids[index],
                    words,
                )
                _add_after(data, after[0], words, out)
        out.sort()
        if muted_out:
            muted_out.sort()
        return out

    def _scan(
        self,
        db: Any,
        ids: dict[bytes, list[int]],
        data: bytes,
        mute: frozenset[bytes],
        skipped: list[int] | None,
        out: list[int],
        gate_ids: dict[int, int],
        muted_out: list[int] | None = None,
        after_ids: dict[int, int] | None = None,
        words: list[tuple[int, int]] | None = None,
    ) -> set[int]:
        """Scan `data` with `db`, adding an offset inside each line a pattern matched to
        `out` (a muted pattern's to `muted_out` when given; an `after_ids` word's end and
        length to `words`); returns the gated groups whose literal it holds."""
        add = out.append
        muted = frozenset(i for p in mute for i in ids.get(p, ()))
        gates: set[int] = set()
        hits = [0]
        after_ids = after_ids or {}
        if muted or gate_ids or after_ids:
            special = muted | gate_ids.keys() | after_ids.keys()
            add_muted = muted_out.append if muted_out is not None else None
            add_word = words.append if words is not None else None

            def on_match(i: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
                if i not in special:
                    add(end - 1)
                elif i in muted:
                    if add_muted is None:
                        hits[0] += 1
                    else:
                        add_muted(end - 1)
                elif i in after_ids:
                    add_word((end, after_ids[i]))  # type: ignore[misc]
                else:
                    gates.add(gate_ids[i])

        else:

            def on_match(_i: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
                add(end - 1)  # the match's last byte: inside its line

        db.scan(data, match_event_handler=on_match, scratch=_scratch(self._local, db))
        if skipped is not None:
            skipped[0] += hits[0]
        return gates

    def find_plain(
        self,
        data: bytes,
        mute: frozenset[bytes] = frozenset(),
        skipped: list[int] | None = None,
        muted_out: list[int] | None = None,
    ) -> list[int]:
        """Same lines as `find`, by the marker scan and a check of each candidate line."""
        gates = [
            i
            for i, g in enumerate(self._gated)
            if g.gate.literal in data and self._words_pass(i, data)
        ]
        strong, compiled = self._plain_res()
        every = (*self._verdicts, *(p for i in gates for p in self._gated[i].patterns()))
        verdicts = [compiled[p] for p in every if p not in mute]
        muted = [compiled[p] for p in every if p in mute]
        once = [compiled[p] for p in self._once]
        # each gated group's once patterns are their own scan's: their first line per chunk
        once += [compiled[p] for i in gates for p in self._gated[i].once]
        out: list[int] = []
        last_end = -1
        once_seen: set[int] = set()
        for hit in self._markers.find(data):
            if hit <= last_end:
                continue
            start = data.rfind(b"\n", 0, hit) + 1
            end = data.find(b"\n", hit)
            end = len(data) if end < 0 else end
            last_end = end
            line = data[start:end]
            # as in a scan: every once pattern the line matches is used up (each reports its
            # first match only) and every muted match counted, whatever else makes it hot
            first_of_once = _first_of_once(line, once, once_seen)
            if muted_out is not None and muted:
                if any(p.search(line) for p in muted):
                    muted_out.append(hit)
            elif skipped is not None and muted:
                skipped[0] += sum(1 for p in muted if p.search(line))
            if first_of_once or strong.search(line) or any(p.search(line) for p in verdicts):
                out.append(hit)
        return out


def _add_after(data: bytes, prefix: bytes, words: list[tuple[int, int]], out: list[int]) -> None:
    """Add to `out` an offset inside each line where a word of `words` (its end and length)
    follows `prefix`."""
    rfind, find = data.rfind, data.find
    line_end = -1
    for end, length in sorted(words):
        if end <= line_end:
            continue  # this line is in already
        start = end - length
        line_start = rfind(b"\n", 0, start) + 1
        if find(prefix, line_start, start) >= 0:
            out.append(end - 1)
            line_end = find(b"\n", end)
            if line_end < 0:
                line_end = len(data)


def _escaped(needle: bytes) -> bytes:
    """A literal for a hyperscan expression: every byte but letters and digits escaped."""
    return b"".join(bytes([c]) if chr(c).isalnum() else b"\\x%02x" % c for c in needle)


def _first_of_once(line: bytes, once: list[re.Pattern[bytes]], seen: set[int]) -> bool:
    """Whether `line` is the first match of a once pattern not `seen` yet (all it matches are
    marked seen)."""
    first = False
    for i, pattern in enumerate(once):
        if i not in seen and pattern.search(line):
            seen.add(i)
            first = True
    return first


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
