"""`HotLines`: the lines of a chunk that can make an event, found in one compiled pass."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from triage.scan import hs_cache, prefilter
from triage.scan.engines import hyperscan_module, scratch
from triage.scan.markers import MarkerSet
from triage.scan.prefilter import Prefilter, line_local, starts_covered


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
    lines and each is checked with `re` (the same lines, slower). With `prefilter` (the
    default), each chunk is first scanned for the few pieces every pattern's line must hold
    (`triage.scan.prefilter`) and the gates' literals, up to the first hit: a chunk with none
    has no hot line, and skips the main scan.
    """

    def __init__(
        self,
        markers: MarkerSet,
        strong: Iterable[str],
        verdicts: Iterable[bytes],
        once: Iterable[bytes] = (),
        gated: Iterable[Gated] = (),
        *,
        prefilter: bool = True,
        ordinary: Iterable[str] = (),
        per_line: Iterable[bytes] = (),
    ) -> None:
        self._markers = markers
        self._strong = sorted({n.lower().encode("ascii") for n in strong})
        self._verdicts = list(verdicts)
        # verdicts that match many times in one line of prose (the generic error and warning
        # words, a log level): the scan reports each line they match once, at its end, in
        # one id they share, not each match (torch's warning lines, one every few KB of HF
        # Trainer output, hold 3-4 each, and each report is a call into Python)
        self._per_line = frozenset(
            v for v in per_line if v in self._verdicts and b"$" not in v and line_local(v)
        )
        self._once = list(once)
        self._gated = list(gated)
        # the main database and one per gated group: (database, ids of each pattern)
        self._hs_main: tuple[Any, dict[bytes, list[int]]] | None = None
        self._hs_groups: dict[int, tuple[Any, dict[bytes, list[int]]]] = {}
        self._gate_ids: dict[int, int] = {}  # main database id of a gate literal -> group
        self._word_dbs: dict[int, Any] = {}
        self._after_ids: dict[int, dict[int, int]] = {}  # group -> {id of a word: its length}
        self._prefilter = prefilter
        self._ordinary = tuple(ordinary)  # healthy lines: no prefilter piece is in them
        self._hs_first: Any = None  # the prefilter's database
        self._first_test: Prefilter | None = None
        self._hs_cross: Any = None  # `_crossing()`, False when there is none
        self._cross_from_first: bool | None = None  # `_crossing_from_first_line()`
        self._hs_local: tuple[Any, dict[bytes, list[int]]] | None = None
        self._local_gate_ids: dict[int, int] = {}
        self._first_local = True  # whether the prefilter's whole patterns stay in a line
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
        hs = hyperscan_module()
        if hs is None:
            low = data.lower()  # the plain engine: slow anyway
            return any(w.lower() in low for w in words)
        db = self._word_dbs.get(index)
        if db is None:
            db = self._word_dbs[index] = hs_cache.database(
                hs,
                [_escaped(w) for w in words],
                list(range(len(words))),
                [hs.HS_FLAG_CASELESS | hs.HS_FLAG_SINGLEMATCH] * len(words),
            )
        try:
            db.scan(data, match_event_handler=lambda *_: True, scratch=scratch(self._local, db))
        except hs.ScanTerminated:  # the handler stops the scan at the first word found
            return True
        return False

    @staticmethod
    def _compile(
        groups: list[tuple[list[bytes], int]],
        per_line: Sequence[bytes] = (),
    ) -> tuple[Any, dict[bytes, list[int]]]:
        """One database of (patterns, flags) groups, and the ids of each pattern; then the
        `per_line` patterns, each extended to the end of its line under one id they share
        (hyperscan reports an id once per end offset: once per line)."""
        expressions = [p for patterns, _ in groups for p in patterns]
        flags = [f for patterns, f in groups for _ in patterns]
        numbers = list(range(len(expressions)))
        shared = len(expressions)
        expressions += [b"(?:" + p + rb")[^\n]*(?:\n|\z)" for p in per_line]
        flags += [0] * len(per_line)
        numbers += [shared] * len(per_line)
        db = hs_cache.database(hyperscan_module(), expressions, numbers, flags)
        ids: dict[bytes, list[int]] = {}
        keys = [*(p for patterns, _ in groups for p in patterns), *per_line]
        for i, pattern in zip(numbers, keys, strict=True):
            ids.setdefault(pattern, []).append(i)
        return db, ids

    def _split(self, patterns: list[bytes], local: bool) -> list[bytes]:
        crossing = set(self.first_test().crossing)
        return [p for p in patterns if (p not in crossing) is local]

    def _main(self, local: bool = False) -> tuple[Any, dict[bytes, list[int]]]:
        """The main scan of a whole chunk, or (`local`) of a chunk from the line of its first
        prefilter hit on: only the patterns whose matches stay within a line (`line_local`;
        the others are `_crossing()`, a scan of the whole chunk of their own)."""
        got = self._hs_local if local else self._hs_main
        if got is None:
            hs = hyperscan_module()
            gates = [_escaped(g.gate.literal) for g in self._gated]
            strong = [*map(_escaped, self._strong)]
            verdicts = self._split(self._verdicts, True) if local else self._verdicts
            once = self._split(self._once, True) if local else self._once
            per_line = [v for v in verdicts if v in self._per_line]
            got = self._compile(
                [
                    (strong, hs.HS_FLAG_CASELESS),
                    ([v for v in verdicts if v not in self._per_line], 0),
                    (once, hs.HS_FLAG_SINGLEMATCH),
                    (gates, hs.HS_FLAG_SINGLEMATCH),
                ],
                per_line,
            )
            first = len(strong) + len(verdicts) - len(per_line) + len(once)
            gate_ids = {first + i: i for i in range(len(gates))}
            if local:
                self._hs_local, self._local_gate_ids = got, gate_ids
            else:
                self._hs_main, self._gate_ids = got, gate_ids
        return got

    def _crossing(self) -> tuple[Any, dict[bytes, list[int]]] | None:
        """The scan of the patterns a match of which may span lines (None: there are none)."""
        if self._hs_cross is None:
            hs = hyperscan_module()
            verdicts = self._split(self._verdicts, False)
            once = self._split(self._once, False)
            self._hs_cross = (
                self._compile([(verdicts, 0), (once, hs.HS_FLAG_SINGLEMATCH)])
                if verdicts or once
                else False
            )
        return self._hs_cross or None

    def _crossing_from_first_line(self) -> bool:
        """Whether a chunk may be scanned with every pattern from the line of its first
        prefilter hit on: the patterns a match of which may span lines (`_crossing()`) all
        begin with a text holding a prefilter piece (`prefilter.starts_covered`), so none of
        their matches begins before that line. Otherwise they are scanned over the whole chunk
        (~0.2 ms a MB: a healthy log's last chunk pays it for the failure at its end)."""
        if self._cross_from_first is None:
            first = self.first_test()
            self._cross_from_first = all(starts_covered(p, first.literals) for p in first.crossing)
        return self._cross_from_first

    def first_test(self) -> Prefilter:
        """What a chunk must hold for the main scan to find a line in it (`prefilter`)."""
        if self._first_test is None:
            self._first_test = prefilter.derive(
                self._strong, [*self._verdicts, *self._once], ordinary=self._ordinary
            )
        return self._first_test

    def _first(self) -> Any:
        if self._hs_first is None:
            hs = hyperscan_module()
            first = self.first_test()
            gates = [g.gate.literal for g in self._gated]
            expressions = [
                *map(_escaped, first.literals),
                *first.patterns,
                *map(_escaped, gates),
            ]
            flags = [hs.HS_FLAG_CASELESS] * len(first.literals)
            flags += [0] * (len(first.patterns) + len(gates))
            self._hs_first = hs_cache.database(
                hs, expressions, list(range(len(expressions))), flags
            )
            self._first_local = not set(first.patterns) & set(first.crossing)
        return self._hs_first

    def _first_line(self, data: bytes) -> int:
        """The start of the first line of `data` that holds a prefilter piece, a pattern
        kept whole or a gate's literal (the scan stops there); -1 when none does."""
        db = self._first()
        hit: list[int] = []

        def on_match(_i: int, _start: int, end: int, _flags: int, _ctx: object) -> bool:
            hit.append(end)
            return True  # ends the scan

        try:
            db.scan(data, match_event_handler=on_match, scratch=scratch(self._local, db))
        except hyperscan_module().ScanTerminated:
            pass
        if not hit:
            return -1
        if not self._first_local:
            return 0  # a pattern kept whole may have begun lines before: read it all
        return data.rfind(b"\n", 0, max(hit[0] - 1, 0)) + 1

    def _group(self, index: int) -> tuple[Any, dict[bytes, list[int]]]:
        got = self._hs_groups.get(index)
        if got is None:
            hs = hyperscan_module()
            group = self._gated[index]
            words = list(group.after[1]) if group.after else []
            got = self._hs_groups[index] = self._compile(
                [
                    (list(group.verdicts), 0),
                    (list(group.once), hs.HS_FLAG_SINGLEMATCH),
                    ([*map(_escaped, words)], hs.HS_FLAG_CASELESS),
                ]
            )
            first = len(group.verdicts) + len(group.once)
            self._after_ids[index] = {first + j: len(w) for j, w in enumerate(words)}
        return got

    def warm(self, groups: Iterable[int] = ()) -> None:
        """Compile the hyperscan databases now (before worker processes fork): the main one
        and those of `groups` (indexes into `gated`)."""
        if hyperscan_module() is not None and self._markers.engine == "hyperscan":
            self._main()
            if self._prefilter:
                self._first()
                if not self._crossing_from_first_line():
                    self._main(local=True)
                    self._crossing()
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
        if hyperscan_module() is None or self._markers.engine != "hyperscan":
            return self.find_plain(data, mute, skipped, muted_out)
        if mute & self._per_line:
            raise ValueError("a per-line verdict shares its id: it cannot be muted alone")
        begin = self._first_line(data) if self._prefilter else 0
        if begin < 0:
            return []  # no line of the chunk can be hot
        out: list[int] = []
        if begin * _WHOLE_SCAN_BELOW < len(data):  # every pattern over the whole chunk, in one pass
            db, ids = self._main()
            gates = self._scan(db, ids, data, mute, skipped, out, self._gate_ids, muted_out)
        else:
            already = len(muted_out) if muted_out is not None else 0
            # from the first hit's line on: every pattern in one pass where the line-spanning
            # ones begin on a piece's line too, else those over the whole chunk after
            whole_from_first = self._crossing_from_first_line()
            if whole_from_first:
                db, ids = self._main()
                gate_ids = self._gate_ids
            else:
                db, ids = self._main(local=True)
                gate_ids = self._local_gate_ids
            view = memoryview(data)[begin:]
            gates = self._scan(db, ids, view, mute, skipped, out, gate_ids, muted_out)
            out[:] = [o + begin for o in out]
            if muted_out:
                muted_out[already:] = [o + begin for o in muted_out[already:]]
            crossing = None if whole_from_first else self._crossing()
            if crossing is not None:
                self._scan(crossing[0], crossing[1], data, mute, skipped, out, {}, muted_out)
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
        data: bytes | memoryview,
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

        db.scan(data, match_event_handler=on_match, scratch=scratch(self._local, db))
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


# A chunk whose first candidate line lies in its first 1/_WHOLE_SCAN_BELOW is scanned whole in
# one pass: the line-spanning patterns' pass of their own over the whole chunk (the other way,
# ~0.2 ms a MB) costs more than the main scan of so short a head (~0.75 ms a MB on HF Trainer
# output, whose every chunk has a hot line near its start).
_WHOLE_SCAN_BELOW = 8


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
    # one table lookup a byte (C speed): ~2,000 needles are escaped before the workers fork
    return b"".join(map(_ESCAPES.__getitem__, needle))


_ESCAPES = [bytes([c]) if chr(c).isalnum() else b"\\x%02x" % c for c in range(256)]


def _first_of_once(line: bytes, once: list[re.Pattern[bytes]], seen: set[int]) -> bool:
    """Whether `line` is the first match of a once pattern not `seen` yet (all it matches are
    marked seen)."""
    first = False
    for i, pattern in enumerate(once):
        if i not in seen and pattern.search(line):
            seen.add(i)
            first = True
    return first
