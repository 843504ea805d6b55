"""When a log's lines happened: the stamps read so far, per output stream, and the bounds an
untimed event gets from them (a part of the log parser, `_LogParser`)."""

from __future__ import annotations

from dataclasses import replace
from operator import itemgetter

from triage.parsers import timestamps as ts
from triage.parsers.prefixes import Prefixes, peel
from triage.scan.reader import clean_last

# one output stream of an interleaved log: host, task, local rank, rank
Stream = tuple[str | None, int | None, int | None, int | None]
WHOLE_STREAM: Stream = (
    None,
    None,
    None,
    None,
)  # a line without prefixes: the launcher, a rank's file


def stream_of(pre: Prefixes | None) -> Stream:
    """One output stream of an interleaved log: its host, task and rank prefixes."""
    if pre is None:
        return WHOLE_STREAM
    return (pre.host, pre.task, pre.local_rank, pre.rank if pre.local_rank is None else None)


class StampKeeping:
    """The parser's stamp bookkeeping: the latest time of the file and of each stream, the
    repeats whose times are read only when asked, and the untimed events waiting for the
    launcher's next stamp."""

    @property
    def last_time(self) -> float | None:
        """The latest time seen on a line read so far."""
        if self._pending:
            self._resolve_pending()
        return self._last_time

    @last_time.setter
    def last_time(self, value: float | None) -> None:
        if self._pending:
            self._resolve_pending()  # the other streams' latest stamps among them
        self._last_time = value

    def stamped(self, number: int, when: float, stream: Stream | None = None) -> None:
        """Line `number` (the line read now) carries the time `when`: the upper bound of the
        untimed events before it, if it is the launcher's (an unprefixed line)."""
        self.last_time = when
        if stream is None:
            stream = stream_of(self._pre)
        if len(self._stream_time) >= 4096:
            self._stream_time.clear()
        self._stream_time[stream] = when
        self._stamps.append((number, when, stream))
        if not self._after_wanted:
            return
        if stream != WHOLE_STREAM:
            return
        for theirs in list(self._after_wanted):
            waiting = []
            for index in self._after_wanted.pop(theirs, ()):
                ev = self.events[index]
                if (ev.end_line or ev.line or 0) >= number:
                    waiting.append(index)
                else:
                    self.events[index] = replace(ev, time_after=when)
            if waiting:
                self._after_wanted[theirs] = waiting

    def _stamped_repeat(self, number: int, raw: bytes, stream: Stream) -> None:
        """A repeat read as a stamp: parsed for its time alone (its date may not exist)."""
        when = self._time_of(peel(clean_last(raw)))
        if when is not None:
            self.stamped(number, when, stream)

    def _before(self, stream: Stream) -> float | None:
        """The latest stamp of the stream, else the launcher's (its banner precedes every
        worker's line)."""
        if self._pending:
            self._resolve_pending()
        own = self._stream_time.get(stream)
        return own if own is not None else self._stream_time.get(WHOLE_STREAM)

    def _resolve_pending(self) -> None:
        # newest first: the first time found of a stream is its latest (a repeat's date can
        # be invalid where its first line's was not, so an older one may still hold it)
        pending = self._pending[:]
        self._pending.clear()  # in place: the chunk loop holds this list
        found: set[Stream] = set()
        # up to 4,096 repeats of a stream or two: done once each stream's newest is read
        streams = len(set(map(itemgetter(1), pending)))
        latest = None
        for raw, stream in reversed(pending):
            if stream in found:
                continue
            when = self._time_of(peel(clean_last(raw)))
            if when is None:
                continue
            found.add(stream)
            if latest is None:
                latest = self._last_time = when
            if len(self._stream_time) >= 4096:
                self._stream_time.clear()
            self._stream_time[stream] = when
            if len(found) == streams:
                break

    def _fix_years(self) -> None:
        if not self.hint.learned:
            return
        for index, yl in self.yearless:
            ev = self.events[index]
            when = ts.yearless(*yl, self.hint)
            if when is not None and when != ev.time:
                self.events[index] = replace(ev, time=when)
