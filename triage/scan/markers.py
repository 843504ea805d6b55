"""`MarkerSet`: every occurrence of a set of case-insensitive literals in a chunk, fast."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from triage.scan import hs_cache
from triage.scan.engines import hyperscan_module, numpy_module, scratch

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
        return "numpy" if numpy_module() is not None else "plain"

    def _hyperscan_ready(self) -> bool:
        """Whether `find` runs on hyperscan; compiles its database on the first call."""
        if self._hs_find is not None:
            return True
        if self._engine == "numpy":
            return False
        hs = hyperscan_module()
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
            hs = hyperscan_module()
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
        np = numpy_module()
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
            np = numpy_module()
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
            found.scan(data, match_event_handler=on_match, scratch=scratch(self._local, found))
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
            lines.scan(data, match_event_handler=on_line, scratch=scratch(self._local, lines))
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
        np = numpy_module()
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
        if len(self._needles) <= 8:
            # a few `in` tests beat a scan's set-up on a short line, and on a long one the
            # scan's call back per occurrence (a tqdm line repeats `it/s` in each redraw)
            low = data.lower()
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
