"""The log parser's driver: the chunks of a log read, each hot line handed to its record or
read alone, repeats replayed, events emitted and capped; `parse` is the entry point."""

from __future__ import annotations

import collections
import contextlib
import io
import os
import re
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import replace
from typing import IO, Any

from triage import knowledge
from triage.knowledge.log_shapes import holds
from triage.model import (
    C10dFacts,
    Event,
    EventKind,
    Level,
    LineNotice,
    LogLineFacts,
    ParsedSource,
    RaisedException,
    RankExit,
    Source,
    SourceKind,
    Traceback,
)
from triage.parsers import timestamps as ts
from triage.parsers.common import MAX_PASTE, parser_stopped, text_digest
from triage.parsers.nccl import NcclTracker, fill_ranks
from triage.parsers.prefixes import Prefixes, peel
from triage.parsers.rank_log.code_listing import leading_code_lines
from triage.parsers.rank_log.events import RecordEvents
from triage.parsers.rank_log.limits import (
    MAX_EVENTS,
    MAX_SAME_ERROR,
    MAX_WARNINGS,
    SCAN_ALL_BELOW,
    STALE_LINES,
)
from triage.parsers.rank_log.line_events import (
    ERROR_AGAIN,
    NOT_A_REPEAT,
    WARNING_AGAIN,
    LineEvents,
)
from triage.parsers.rank_log.needles import MUTE_COMMS, LogScanTables, scan_tables
from triage.parsers.rank_log.progress import (
    DIGITS_TO_0,
    RAW_PREFIXES,
    SHAPE_MAX,
    ProgressReading,
    StreamProgress,
)
from triage.parsers.rank_log.records import (
    CLOSE,
    CONSUMED,
    DONE,
    CppExceptionRecord,
    CppTailRecord,
    FaultHandlerRecord,
    Record,
    SummaryRecord,
    TracebackRecord,
)
from triage.parsers.rank_log.stamps import WHOLE_STREAM, StampKeeping, Stream, stream_of
from triage.scan.engines import LineCounter
from triage.scan.reader import ChunkReader, line_text, select_spans

# --------------------------------------------------------------------------- the parser

# Bar redraws, colours and NUL runs make a line more than its decoded text: no repeat. Looked
# for in a new line alone (a pass over the whole chunk for each byte cost ~0.1 ms a MB).
_ODD_BYTE = re.compile(rb"[\r\x1b\x00]").search
# Repeats whose stamps wait to be read (only each stream's newest ever is), at most
_MAX_PENDING = 4096

# the kinds whose text may name its own rank in a c10d tag (`[Rank 2] Watchdog caught ...`)
_SELF_NAMING = frozenset(
    {EventKind.ERROR_LINE, EventKind.WARNING_LINE, EventKind.TRACEBACK, EventKind.CPP_EXCEPTION}
)


class _LogParser(LineEvents, RecordEvents, ProgressReading, StampKeeping):
    """One log's parse: the state its parts (`LineEvents`, `RecordEvents`, `ProgressReading`,
    `StampKeeping`) share."""

    def __init__(
        self,
        source: Source,
        scan_all: bool,
        tables: LogScanTables,
        opener: Callable[[], IO[bytes]] | None = None,
        max_events: int = MAX_EVENTS,
        replay_repeats: bool = True,
        progress_by_shape: bool = True,
    ) -> None:
        self.max_events = max_events
        # a repeat of a line read alone gets that line's verdict without being parsed
        self.repeats = replay_repeats
        # progress windows are read line by line with a shape cache, else from a marker scan
        self.by_shape = progress_by_shape
        self.source = source
        self.tables = tables
        self.opener = opener or source.open  # a paste already read: its bytes
        self.scan_all = scan_all
        self.pasted = source.kind is SourceKind.TEXT
        self.events: list[Event] = []
        self.warnings: list[str] = []
        self.records: dict[str, Record] = {}
        self.nccl = NcclTracker()
        self.local_to_rank: dict[tuple[str | None, int], int] = {}
        self.progress: dict[tuple[str, int | None], StreamProgress] = {}
        self.last_error_of: dict[str, int] = {}  # stream -> index of its last c10 error event
        self.warning_count = 0
        self.warnings_dropped = 0
        self.same_error: dict[str, int] = {}
        # (template, stream) of a script's own end line already made an event: its repeats
        # (a sweep's many runs in one file) say nothing more (`LineEvents._emit_template`)
        self.ended: set[tuple[str, str]] = set()
        self.errors_dropped = 0
        self.events_dropped = 0
        self.yearless: list[tuple[int, tuple[str, str, str, str, str | None]]] = []
        self._last_time: float | None = None
        # A hot line that repeats an earlier one apart from its digits (the same warning every
        # step, a config dump printed again) gets that one's verdict without being parsed:
        # digit-masked line -> (where its raw prefixes end, {those prefixes as they are:
        # (outcome, whether it had a time, its stream)}): a line is looked up by one
        # `translate`, its prefixes found (a regex) only when it is new. `_outcome` and
        # `_timed` are what parsing the line now said; `_pending` the raw repeats since with
        # their streams, newest last, whose times are read only if something asks for them.
        self._repeats: dict[bytes, tuple[int, dict[bytes, tuple[int, bool, Stream]]]] = {}
        self._repeat_count = 0  # verdicts kept in `_repeats`
        self._outcome = 0
        self._timed = False
        self._pending: list[tuple[bytes, Stream]] = []
        # An untimed event lies between the stamps around it in its own output stream (a
        # console interleaves ranks whose buffers flush late): the one read before its first
        # line (at a record's opening: a record emits only when it closes, after later lines;
        # the launcher's where its stream has none yet) and the first read after its last
        # line, of the launcher's (unprefixed) lines only: it reports an exit after it
        # happened, where a rank's own later line may have sat in its stdout buffer, stamped
        # before an error its stderr printed at once.
        # Bounded: the latest stamps with their lines and streams, the latest per stream, the
        # events still waiting for a stamp after them.
        self._stamps: collections.deque[tuple[int, float, Stream]] = collections.deque(maxlen=64)
        self._stream_time: dict[Stream, float] = {}
        self._after_wanted: dict[Stream, list[int]] = {}
        # a record's stamps before its first line: the file's latest, its stream's latest
        self._opened_before: dict[str, tuple[float | None, float | None]] = {}
        self._closing_before: tuple[float | None, float | None] | None = None
        self.chunk = 0
        self.code_until = 0  # the last line of a code listing the log opens with
        mtime = None
        try:
            if source.path and os.path.isfile(source.path):
                mtime = os.path.getmtime(source.path)
        except (OSError, ValueError):
            mtime = None
        self.hint = ts.YearHint.from_mtime(mtime)
        self.reader: ChunkReader | None = None
        self._pre: Prefixes | None = None  # the prefixes of the line `handle` read last
        # digit-masked line -> (holds a progress marker, raw prefix end, rank start, rank end),
        # kept with the tables: the same for every file parsed with them
        self._line_shapes = tables.line_shapes

    # ------------------------------------------------------------------ driving

    def dense(self) -> bool:
        return self.scan_all or bool(self.records)

    def run(self) -> None:
        stream = self.opener()
        try:
            self.reader = reader = ChunkReader(stream)
            for data, first in reader:
                self.chunk += 1
                if self.chunk == 1 and not self.pasted:
                    self.code_until = leading_code_lines(data)
                counter = reader.counter or LineCounter(data, first)
                self._read_chunk(reader, data, counter)
                if not self.scan_all:
                    self.scan_progress(data, counter)
        finally:
            with contextlib.suppress(Exception):
                stream.close()

    def _read_chunk(self, reader: ChunkReader, data: bytes, counter: LineCounter) -> None:
        """Read the chunk's hot lines (and every line while a record is open).

        The loop is `select_spans` written out, with a repeat's replay inline: a log that
        prints the same warning every step has thousands of hot lines per chunk, and each
        generator step and call costs ~1 us here.
        """
        if self.scan_all:
            for number, start, end in select_spans(data, [], self.dense, counter):
                for text in line_text(reader, data[start:end], number):  # type: ignore[arg-type]
                    self.handle(number, text)  # type: ignore[arg-type]
            return
        muted = self.nccl.comms_full
        skipped = self.nccl.skipped
        # While set-ups are still read, their lines come apart (`comms`): once the tracker
        # holds enough of them, the rest of the chunk goes on without them, unscanned again.
        comms: list[int] = []
        if muted:
            offsets = self.tables.hot_lines.find(data, MUTE_COMMS, skipped)
        else:
            others = self.tables.hot_lines.find(data, MUTE_COMMS, None, comms)
            offsets = sorted(others + comms) if comms else others
        plain = self.repeats
        known_shape = self._repeats.get
        pending = self._pending
        keep_stamp = pending.append
        records = self.records  # the one dict, kept up to date in place
        mask = DIGITS_TO_0
        rfind, find = data.rfind, data.find
        n = len(data)
        pos = i = 0
        k = len(offsets)
        while pos < n:
            if records:  # a record is open: every line, in order
                for number, start, end in select_spans(data, [], self.dense, counter, pos):
                    for text in line_text(reader, data[start:end], number):  # type: ignore[arg-type]
                        self.handle(number, text)  # type: ignore[arg-type]
                    if not self.records:
                        break
                else:
                    return
                pos = end + 1
                continue
            i = bisect_left(offsets, pos, i)
            if i >= k:
                return
            hit = offsets[i]
            start = rfind(b"\n", pos, hit) + 1
            if start < pos:
                start = pos
            end = find(b"\n", hit)
            if end < 0:
                end = n
            pos = end + 1
            raw = data[start:end]
            new = False
            if plain and end - start <= SHAPE_MAX:
                shape = raw.translate(mask)
                known = known_shape(shape)
                # A line of a known shape holds no `NCCL` and no odd byte, as its first did
                # (masking changes digits alone): those tests are for new lines only.
                if known is not None:
                    verdict = known[1].get(raw[: known[0]])
                    if verdict is not None:  # a repeat: its first line's verdict, unparsed
                        outcome, timed, stream = verdict
                        if outcome == WARNING_AGAIN:
                            if self.warning_count >= MAX_WARNINGS:
                                self.warnings_dropped += 1
                        elif outcome == ERROR_AGAIN:
                            self.errors_dropped += 1
                        if timed:
                            if self._after_wanted and stream == WHOLE_STREAM:
                                # events wait for the launcher's next stamp: this line's
                                self._stamped_repeat(counter.number_at(start), raw, stream)
                                continue
                            keep_stamp((raw, stream))
                            if len(pending) >= 64 and (
                                len(pending) >= _MAX_PENDING or not self.hint.learned
                            ):
                                # bounded: each stream's newest is read. Until the file's year
                                # is known, a stamp read may teach it: the repeats are read in
                                # small batches, in order; after, their order no longer matters
                                self._resolve_pending()
                        continue
                new = b"NCCL" not in raw and _ODD_BYTE(raw) is None
            if new:
                self._read_new(counter.number_at(start), raw, shape)
            else:
                number = counter.number_at(start)
                for text in line_text(reader, raw, number):
                    self.handle(number, text)
            if not muted and self.nccl.comms_full:
                # The communicator set-ups to keep are all read: the rest of this chunk is
                # scanned again without them (they are ~2 of every ~70 lines of an NCCL init
                # log, each ~25 us here).
                muted = True
                offsets = [o for o in others if o >= pos]
                skipped[0] += sum(1 for o in comms if o >= pos)
                i, k = 0, len(offsets)

    def _read_new(self, number: int, raw: bytes, shape: bytes) -> None:
        """Parse a line read alone (no record open) whose verdict is not known yet, and keep
        the verdict for its repeats when their digits cannot change it. `shape` is the line
        with its digits masked (`DIGITS_TO_0`)."""
        if self._pending and not self.hint.learned:
            self._resolve_pending()  # read with the year hint the lines were written under
        events = len(self.events)
        self._outcome, self._timed = NOT_A_REPEAT, False
        text = raw.decode("utf-8", "replace").rstrip()
        self.handle(number, text)
        pre = self._pre
        # the raw prefixes end where they do in the line: masked digits are still digits
        prefix_end = RAW_PREFIXES.match(shape).end()  # type: ignore[union-attr]
        if (
            self._outcome != NOT_A_REPEAT
            and len(self.events) == events
            and not self.records
            and pre is not None
            # the rank a line teaches comes from its prefix, kept whole in the key
            and (
                pre.rank is None
                or pre.local_rank is None
                or len(text) - len(pre.rest) <= prefix_end
            )
            and not self.tables.digit_sensitive(raw[:prefix_end] + shape[prefix_end:])
        ):
            self._repeat_count += 1
            if self._repeat_count > 4096:  # bounded: start again
                self._repeats.clear()
                self._repeat_count = 1
            known = self._repeats.get(shape)
            if known is None:
                known = self._repeats[shape] = (prefix_end, {})
            known[1][raw[:prefix_end]] = (self._outcome, self._timed, stream_of(pre))

    def handle(self, number: int, text: str) -> None:
        self._pre = None
        if number <= self.code_until:
            return  # the script's own source printed first (`code_listing`)
        if self.records:
            self._close_stale(number)
        if not text.strip():
            rec = self.records.get("")
            if rec is not None:
                self._feed(rec, number, text)
            return
        pre = self._pre = peel(text)
        if self.scan_all:
            self.observe_progress(number, pre.rest, pre)
        if pre.rank is not None and pre.local_rank is not None and len(self.local_to_rank) < 65536:
            self.local_to_rank[(pre.host, pre.local_rank)] = pre.rank
        rec = self.records.get(pre.key)
        if rec is not None:
            verdict = self._feed(rec, number, pre.rest)
            if verdict == CONSUMED:
                return
        self.classify(number, pre)

    def _feed(self, rec: Record, number: int, rest: str) -> int:
        verdict: int = rec.feed(number, rest)  # type: ignore[attr-defined]
        if verdict in (CLOSE, DONE):
            self._close(rec)
        return CONSUMED if verdict == DONE else verdict

    def _open(self, rec: Record) -> None:
        old = self.records.get(rec.stream)
        if old is not None:
            self._close(old)
        if len(self.records) >= 1024:  # bounded: give up the oldest record
            self._close(min(self.records.values(), key=lambda r: r.last_line))
        self.records[rec.stream] = rec
        stream = stream_of(getattr(rec, "pre", None))
        self._opened_before[rec.stream] = (self.last_time, self._before(stream))

    def _close_stale(self, number: int) -> None:
        for key in [k for k, r in self.records.items() if number - r.last_line > STALE_LINES]:
            self._close(self.records[key])

    def finish(self) -> None:
        for rec in list(self.records.values()):
            self._close(rec)
        self._emit_progress()
        self._fix_years()
        fill_ranks(self.events, self.nccl)
        self._fill_local_ranks()
        if self.warnings_dropped:
            self.warnings.append(
                f"{self.warnings_dropped} more warning lines not kept (at most {MAX_WARNINGS} "
                "per source)"
            )
        if self.errors_dropped:
            self.warnings.append(
                f"{self.errors_dropped} repeated error lines not kept "
                f"(at most {MAX_SAME_ERROR} of each)"
            )
        if self.events_dropped:
            self.warnings.append(
                f"{self.events_dropped} more events dropped after the first {self.max_events}"
            )
        comms = self.nccl.dropped_warning()
        if comms:
            self.warnings.append(comms)

    # ------------------------------------------------------------------ events

    def _tagged_rank(self, kind: EventKind, text: str) -> int | None:
        if kind not in _SELF_NAMING:
            return None
        head = text[:400]
        if not holds(head, self.tables.shapes.fact_guards["tagged_rank"]):
            return None
        m = self.tables.shapes.facts["tagged_rank"].search(head)
        return int(m["rank"]) if m is not None else None

    def _rank(self, pre: Prefixes | None, msg_rank: int | None = None) -> int | None:
        if pre is not None and pre.rank is not None:
            return pre.rank
        if msg_rank is not None and msg_rank >= 0:
            return msg_rank
        if pre is not None and pre.local_rank is not None:
            got = self.local_to_rank.get((pre.host, pre.local_rank))
            if got is not None:
                return got
            return None  # an interleaved console: the file's rank is not this line's
        if pre is not None and pre.task is not None:
            return pre.task
        return self.source.rank

    def _emit(
        self,
        kind: EventKind,
        text: str,
        line: int,
        end_line: int,
        pre: Prefixes | None,
        *,
        level: Level,
        msg_rank: int | None = None,
        host: str | None = None,
        pid: int | None = None,
        time: float | None = None,
        attrs: dict[str, Any] | None = None,
        payload: Any = None,
        traceback: Traceback | None = None,
        exception: RaisedException | None = None,
        c10d: C10dFacts | None = None,
        notice: LineNotice | None = None,
        line_numbers: tuple[int | None, ...] | None = None,
        yearless: tuple[str, str, str, str, str | None] | None = None,
        progress: bool = False,
        agent_pid: int | None = None,
    ) -> int | None:
        if len(self.events) >= self.max_events:
            self.events_dropped += 1
            return None
        local_rank = pre.local_rank if pre is not None and pre.local_rank is not None else None
        if local_rank is None and (pre is None or pre.empty):
            local_rank = self.source.local_rank
        attrs = dict(attrs or {})
        untimed = time is None and not progress
        stream = stream_of(pre)
        time_before = own = after = None
        if untimed:
            # `time_before`, the file's latest stamp, orders events across a file (correlate
            # reads it so); `stream_time_before`, its own stream's, is what it is shown after
            time_before, own = self._closing_before or (self.last_time, self._before(stream))
            last = end_line if end_line is not None else line
            after = next(
                (
                    t
                    for n, t, theirs in self._stamps
                    if last is not None and n > last and theirs == WHOLE_STREAM
                ),
                None,
            )
        if pre is not None and pre.task is not None:
            attrs.setdefault("task", pre.task)
        if agent_pid is not None:
            attrs.setdefault("agent_pid", agent_pid)
        self.events.append(
            Event(
                source=self.source.path,
                kind=kind,
                text=text,
                line=line,
                end_line=end_line,
                rank=self._rank(pre, msg_rank),
                local_rank=local_rank,
                host=host or (pre.host if pre is not None else None) or self.source.host,
                pid=pid,
                time=time,
                level=level,
                attrs=attrs,
                traceback=traceback,
                payload=payload,
                exception=exception,
                c10d=c10d,
                notice=notice,
                line_numbers=line_numbers,
                time_before=time_before,
                stream_time_before=own,
                time_after=after,
                tagged_rank=self._tagged_rank(kind, text),
            )
        )
        index = len(self.events) - 1
        if untimed and after is None:
            waiting = self._after_wanted.setdefault(stream, [])
            if len(waiting) >= 256:  # bounded: the oldest stays without one
                del waiting[0]
            waiting.append(index)
        if yearless is not None and time is not None:
            self.yearless.append((index, yearless))
        return index

    def _close(self, rec: Record) -> None:
        self.records.pop(rec.stream, None)
        self._closing_before = self._opened_before.pop(rec.stream, None)
        try:
            self._emit_record(rec)
        finally:
            self._closing_before = None

    def _emit_record(self, rec: Record) -> None:
        if isinstance(rec, TracebackRecord):
            self._emit_traceback(rec)
        elif isinstance(rec, CppExceptionRecord):
            self._emit_cpp(rec)
        elif isinstance(rec, FaultHandlerRecord):
            self._emit_fault(rec)
        elif isinstance(rec, CppTailRecord):
            self._extend_error(rec)
        elif isinstance(rec, SummaryRecord):
            self._emit_summary(rec)

    # ------------------------------------------------------------------ fix-ups

    def _fill_local_ranks(self) -> None:
        if not self.local_to_rank:
            return
        for i, ev in enumerate(self.events):
            if ev.rank is None and ev.local_rank is not None:
                rank = self.local_to_rank.get((ev.host, ev.local_rank))
                if rank is None and ev.host == self.source.host:
                    rank = self.local_to_rank.get((None, ev.local_rank))
                if rank is not None:
                    payload = ev.payload
                    if isinstance(payload, RankExit) and payload.rank is None:
                        payload = replace(payload, rank=rank)
                    self.events[i] = replace(ev, rank=rank, payload=payload)


def parse(
    source: Source,
    *,
    scan_all: bool | None = None,
    kb: knowledge.Knowledge | None = None,
    tables: LogScanTables | None = None,
    max_events: int = MAX_EVENTS,
    replay_repeats: bool = True,
    progress_by_shape: bool = True,
) -> ParsedSource:
    """Notable events of one log. Never raises: problems become `warnings`.

    `scan_all` parses every line instead of only marked ones; by default it is on for small
    inputs (under `SCAN_ALL_BELOW` bytes, or pasted text). `kb` is the run's knowledge (the
    shipped one when None): its rules' keywords make lines notable, in every reading. `tables`
    (tests: another scan engine) stands for `scan_tables(kb)`. Past `max_events` events the
    rest are counted, not kept. `replay_repeats` and `progress_by_shape` are the big-log path's
    two shortcuts (a repeated line's verdict replayed, progress windows read by line shape);
    turned off, the parser reads the same events the long way (tests compare the two).
    """
    tables = tables if tables is not None else scan_tables(kb)
    if scan_all is None:
        scan_all = 0 < source.size <= SCAN_ALL_BELOW  # size 0: unknown, maybe big
    paste = _read_paste(source)
    opener = (lambda: io.BytesIO(paste)) if paste is not None else None
    parser = _LogParser(
        source, scan_all, tables, opener, max_events, replay_repeats, progress_by_shape
    )
    warnings: list[str] = []
    try:
        parser.run()
    except Exception as exc:  # never let one bad file stop a diagnosis
        warnings.append(parser_stopped("log", exc))
    try:
        parser.finish()
    except Exception as exc:
        warnings.append(parser_stopped("log", exc, " while finishing"))
    reader = parser.reader
    if reader is not None:
        warnings[:0] = reader.warnings
    warnings.extend(parser.warnings)
    events = sorted(parser.events, key=lambda e: (e.line or 0, e.kind is EventKind.PROGRESS))
    digest = whole = None
    if paste is not None:
        text = paste.decode("utf-8", errors="replace")
        digest = text_digest(text)
        # no event the paste is about (only context: INFO lines, lines rules look for, input
        # warnings): its whole text is evidence too (a py-spy dump, a P2P matrix, a bare
        # assertion line, NCCL INFO lines that only mean something together)
        if text.strip() and not any(_about(e) for e in events):
            whole = text
    return ParsedSource(
        source=source,
        events=tuple(events),
        warnings=tuple(warnings),
        lines=reader.lines if reader else 0,
        bytes_read=reader.bytes_read if reader else 0,
        text_digest=digest,
        whole_text=whole,
    )


def _about(event: Event) -> bool:
    """Is this an event a paste is about: a warning or an error, not context?"""
    if event.kind is EventKind.INPUT_WARNING or (
        isinstance(event.payload, LogLineFacts) and event.payload.notable
    ):
        return False
    return event.level not in (Level.INFO, Level.DEBUG)


def _read_paste(source: Source) -> bytes | None:
    """All of a pasted text (a TEXT input up to MAX_PASTE bytes), read once: its digest and,
    when no event is found in it, its whole text go with the result. None otherwise, or when
    it cannot be read (the parser then reports why)."""
    if source.kind is not SourceKind.TEXT or not 0 < source.size <= MAX_PASTE:
        return None
    try:
        with source.open() as stream:
            data = stream.read(MAX_PASTE + 1)
    except Exception:  # noqa: BLE001 - reported when the parser opens it again
        return None
    return data if isinstance(data, bytes) else None
