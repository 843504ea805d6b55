"""Records to events: a finished traceback, C++ exception, faulthandler dump or torchrun
summary becomes one event (or one per failed rank)."""

from __future__ import annotations

from dataclasses import replace

from triage.model import (
    C10dFacts,
    CppExceptionFacts,
    EventKind,
    FaultHandlerFacts,
    Level,
    LogLineFacts,
    RaisedException,
    RankExit,
    TracebackFacts,
)
from triage.parsers import timestamps as ts
from triage.parsers import tracebacks
from triage.parsers.rank_log.facts import gloo_timeout_in, message_facts, template_match
from triage.parsers.rank_log.formats import (
    SUMMARY_EXIT,
    SUMMARY_RANK,
    LineMeta,
    int_or_none,
    signal_name,
)
from triage.parsers.rank_log.records import (
    CppExceptionRecord,
    CppTailRecord,
    FaultHandlerRecord,
    SummaryRecord,
    TracebackRecord,
)


class RecordEvents:
    """The parser's record emitters (a part of `_LogParser`)."""

    def _emit_traceback(self, tb: TracebackRecord) -> None:
        frames = tuple(tb.all_frames())
        if (not frames and tb.exc_type is None) or tb.logging_call_stack:
            return
        record = TracebackFacts(
            frames=frames,
            truncated=tb.exc_type is None and not tb.exc_message,
            frames_dropped=tb.frames_dropped,
            headerless=tb.headerless,
        )
        msg = f"{tb.exc_type}: {tb.exc_message or ''}" if tb.exc_type else tb.exc_message or ""
        c10d = message_facts(msg, self.tables.shapes)
        if c10d is None or c10d.gloo_timeout is None:
            # gloo's timeout is often the first link of a chain whose last says only that
            # the pair was closed (`Application timeout caused pair closure`)
            earlier = gloo_timeout_in((m for _, m in tb.earlier if m), self.tables.shapes)
            if earlier is not None:
                c10d = replace(c10d or C10dFacts(), gloo_timeout=earlier)
        text = tb.text()
        self._emit(
            EventKind.TRACEBACK,
            text,
            tb.start,
            tb.last_line,
            tb.pre,
            level=Level.ERROR,
            msg_rank=c10d.rank if c10d is not None else None,
            payload=record,
            exception=RaisedException(tb.exc_type, tb.exc_message),
            c10d=c10d,
            line_numbers=tb.line_numbers(),
            traceback=tracebacks.read(text, [*tb.earlier, (tb.exc_type, tb.exc_message)]),
        )
        if tb.exc_type:
            self._exception_templates(tb, tb.exc_type)

    def _exception_templates(self, tb: TracebackRecord, exc_type: str) -> None:
        """A launcher that reports a worker's end by raising (mp.spawn's join): the line
        templates marked `exception` read the exception line as a line of its own, its type
        by its last dotted part (`ProcessExitedException: process 0 terminated ...`)."""
        line = f"{exc_type.rsplit('.', 1)[-1]}: {tb.exc_message or ''}"
        meta = LineMeta(msg=line)
        for template in self.tables.templates.templates:
            if not template.exception:
                continue
            groups = template_match(template, line, meta)
            if groups is not None:
                # the event quotes the exception line, not the traceback's header
                pre = replace(tb.pre, rest=f"{exc_type}: {tb.exc_message or ''}")
                self._emit_template(template, groups, tb.last_line, pre, meta)
                return

    def _emit_fault(self, fault: FaultHandlerRecord) -> None:
        frames = tuple(fault.frames)
        self._emit(
            EventKind.SIGNAL,
            fault.text(),
            fault.start,
            fault.last_line,
            fault.pre,
            level=Level.FATAL,
            payload=FaultHandlerFacts(
                fatal_error=fault.what,
                signal=self.tables.templates.signal_words.get(fault.what),
                frames=frames,  # innermost first, as faulthandler prints them
            ),
        )

    def _emit_cpp(self, cpp: CppExceptionRecord) -> None:
        c10d = message_facts(cpp.what or "", self.tables.shapes)
        self._emit(
            EventKind.CPP_EXCEPTION,
            cpp.text(),
            cpp.start,
            cpp.last_line,
            cpp.pre,
            level=Level.FATAL,
            msg_rank=c10d.rank if c10d is not None else None,
            payload=CppExceptionFacts(
                exception_class=cpp.cls,
                what=cpp.what,
                raised_from=cpp.raised_from,
                cpp_frames=cpp.frame_count,
            ),
            c10d=c10d,
        )

    def _extend_error(self, tail: CppTailRecord) -> None:
        index = tail.event_index
        if not 0 <= index < len(self.events):
            return
        ev = self.events[index]
        # a c10 error line's C++ stack, printed below it
        line = ev.payload if isinstance(ev.payload, LogLineFacts) else LogLineFacts()
        record = replace(line, raised_from=tail.raised_from, cpp_frames=tail.frame_count)
        self.events[index] = replace(
            ev, text=ev.text + "\n" + tail.text(), end_line=tail.last_line, payload=record
        )

    def _emit_summary(self, summary: SummaryRecord) -> None:
        summary._finish()
        if summary.title is None and not summary.headed:
            return  # a `====` rule and an `[n]:` line alone are not torchrun's table
        summary.done = [e for e in summary.done if "rank" in e.fields or "exitcode" in e.fields]
        hosts = {e.fields.get("host") for e in summary.done}
        for entry in summary.done:
            m = SUMMARY_RANK.match(entry.fields.get("rank", ""))
            if m is not None and m["lr"] is not None and len(self.local_to_rank) < 65536:
                # The table maps local to global ranks; one agent host means one node's file.
                rank_, lr_ = int(m["rank"]), int(m["lr"])
                self.local_to_rank.setdefault((entry.fields.get("host"), lr_), rank_)
                if len(hosts) == 1:
                    self.local_to_rank.setdefault((summary.pre.host, lr_), rank_)
        for entry in summary.done:
            f = entry.fields
            rank = local_rank = exitcode = pid = None
            sig = None
            m = SUMMARY_RANK.match(f.get("rank", ""))
            if m is not None:
                rank, local_rank = int_or_none(m["rank"]), int_or_none(m["lr"])
            m = SUMMARY_EXIT.match(f.get("exitcode", ""))
            if m is not None:
                exitcode, pid, sig = int_or_none(m["code"]), int_or_none(m["pid"]), m["sig"]
            sig = sig or signal_name(exitcode)
            when = ts.parse_dated(f.get("time", "")) if f.get("time") else None
            resolution = ts.dated_resolution(f.get("time", "")) if when is not None else 0.0
            if when is not None:
                self.hint.learn(when)
            host = f.get("host") or None
            error_file = f.get("error_file")
            if error_file in (None, "", "<N/A>"):
                error_file = None
            message = "\n".join(entry.traceback).strip() or None
            exit_ = RankExit(
                rank=rank,
                local_rank=local_rank,
                host=host,
                pid=pid,
                exitcode=exitcode,
                signal=sig,
                time=when,
                error_file=error_file,
                message=message,
                is_root_cause_block=entry.root,
                time_resolution=resolution,
            )
            # the exit itself is the payload; the table's place and title stay here
            attrs = {"summary_index": entry.idx, "title": summary.title}
            pre = replace(summary.pre, rank=None, local_rank=None)
            index = self._emit(
                EventKind.RANK_EXIT,
                "\n".join(entry.lines),
                entry.start,
                entry.end,
                pre,
                level=Level.ERROR,
                msg_rank=rank,
                host=host,
                pid=pid,
                time=when,
                attrs=attrs,
                payload=exit_,
            )
            if index is not None and local_rank is not None:
                ev = self.events[index]
                self.events[index] = replace(ev, rank=rank, local_rank=local_rank)
