"""Records to events: a finished traceback, C++ exception, faulthandler dump or torchrun
summary becomes one event (or one per failed rank)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from triage.model import EventKind, Level, RankExit
from triage.parsers import timestamps as ts
from triage.parsers import tracebacks
from triage.parsers.rank_log.facts import message_facts
from triage.parsers.rank_log.formats import SUMMARY_EXIT, SUMMARY_RANK, int_or_none, signal_name
from triage.parsers.rank_log.records import (
    CppExceptionRecord,
    CppTailRecord,
    FaultHandlerRecord,
    SummaryRecord,
    TracebackRecord,
)

_USER_FRAME_SKIP = ("site-packages", "dist-packages", "/lib/python", "<frozen", "<string>")


class RecordEvents:
    """The parser's record emitters (a part of `_LogParser`)."""

    def _emit_traceback(self, tb: TracebackRecord) -> None:
        frames = tb.all_frames()
        if not frames and tb.exc_type is None:
            return
        user = [f for f in frames if not any(s in f[0] for s in _USER_FRAME_SKIP)]
        attrs: dict[str, Any] = {
            "exc_type": tb.exc_type,
            "exc_message": tb.exc_message,
            "frames": frames,
            "user_frames": user,
            "truncated": tb.exc_type is None and not tb.exc_message,
            "line_numbers": tb.line_numbers(),
        }
        if tb.frames_dropped:
            attrs["frames_dropped"] = tb.frames_dropped
        if tb.headerless:
            attrs["headerless"] = True
        msg = f"{tb.exc_type}: {tb.exc_message or ''}" if tb.exc_type else tb.exc_message or ""
        attrs.update(message_facts(msg, self.tables.shapes))
        text = tb.text()
        self._emit(
            EventKind.TRACEBACK,
            text,
            tb.start,
            tb.last_line,
            tb.pre,
            level=Level.ERROR,
            msg_rank=attrs.get("rank"),
            attrs=attrs,
            traceback=tracebacks.read(text, [*tb.earlier, (tb.exc_type, tb.exc_message)]),
        )

    def _emit_fault(self, fault: FaultHandlerRecord) -> None:
        user = [f for f in fault.frames if not any(s in f[0] for s in _USER_FRAME_SKIP)]
        signal = self.tables.templates.signal_words.get(fault.what)
        self._emit(
            EventKind.SIGNAL,
            fault.text(),
            fault.start,
            fault.last_line,
            fault.pre,
            level=Level.FATAL,
            attrs={
                "signal": signal,
                "fatal_error": fault.what,
                "frames": fault.frames,  # innermost first, as faulthandler prints them
                "user_frames": user,
                "innermost_is_user_code": bool(fault.frames) and fault.frames[0] in user,
            },
        )

    def _emit_cpp(self, cpp: CppExceptionRecord) -> None:
        attrs: dict[str, Any] = {
            "exception_class": cpp.cls,
            "what": cpp.what,
            "raised_from": cpp.raised_from,
            "cpp_frames": cpp.frame_count,
        }
        attrs.update(message_facts(cpp.what or "", self.tables.shapes))
        self._emit(
            EventKind.CPP_EXCEPTION,
            cpp.text(),
            cpp.start,
            cpp.last_line,
            cpp.pre,
            level=Level.FATAL,
            msg_rank=attrs.get("rank"),
            attrs=attrs,
        )

    def _extend_error(self, tail: CppTailRecord) -> None:
        index = tail.event_index
        if not 0 <= index < len(self.events):
            return
        ev = self.events[index]
        attrs = dict(ev.attrs)
        attrs["raised_from"] = tail.raised_from
        attrs["cpp_frames"] = tail.frame_count
        self.events[index] = replace(
            ev, text=ev.text + "\n" + tail.text(), end_line=tail.last_line, attrs=attrs
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
            )
            attrs = {
                "summary_index": entry.idx,
                "title": summary.title,
                "root_cause": entry.root,
                "exitcode": exitcode,
                "signal": sig,
            }
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
