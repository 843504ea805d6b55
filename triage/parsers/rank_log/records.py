"""Multi-line records collected line by line from one output stream: Python tracebacks
(chains kept), C++ exceptions, faulthandler dumps, the tail of a c10 error, torchrun's
failure summary."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from triage.parsers import timestamps as ts
from triage.parsers.nccl import parse_nccl_line
from triage.parsers.prefixes import Prefixes
from triage.parsers.rank_log.formats import (
    BORDER,
    CHAIN,
    CPP_FRAME,
    DEEPSPEED,
    EXC_LINE,
    FAULT_THREAD,
    LIBFABRIC,
    NATIVE_AT,
    NEMO,
    OLD_C10,
    PYLOG,
    RAISED_FROM,
    SUMMARY_FIELD,
    SUMMARY_IDX,
    SUMMARY_TITLE,
    TAGGED_RECORD,
    TB_CUT_FILE,
    TB_FILE,
    TB_HEADER,
    UCX,
    WHAT,
)
from triage.parsers.rank_log.limits import MAX_FRAMES, TB_HEAD, TB_TAIL

# --------------------------------------------------------------------------- multi-line records

CONSUMED, FOREIGN, CLOSE, DONE = 0, 1, 2, 3  # DONE: consumed, and the record is complete


@dataclass
class Record:
    """A multi-line record being collected from one output stream."""

    stream: str
    pre: Prefixes
    start: int
    last_line: int
    head: list[str] = field(default_factory=list)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TB_TAIL))
    omitted: int = 0
    # the file line of each kept line: blank lines, other streams' lines of a shared console
    # and omitted lines are not in the text, so `start + offset` would point elsewhere
    head_numbers: list[int] = field(default_factory=list)
    tail_numbers: deque[int] = field(default_factory=lambda: deque(maxlen=TB_TAIL))

    def add(self, number: int, text: str) -> None:
        self.last_line = number
        if len(self.head) < TB_HEAD:
            self.head.append(text)
            self.head_numbers.append(number)
            return
        if len(self.tail) == self.tail.maxlen:
            self.omitted += 1
        self.tail.append(text)
        self.tail_numbers.append(number)

    def text(self) -> str:
        body = list(self.head)
        if self.omitted:
            body.append(f"... [{self.omitted} lines omitted] ...")
        body.extend(self.tail)
        while body and not body[-1].strip():
            body.pop()
        return "\n".join(body)

    def line_numbers(self) -> tuple[int | None, ...]:
        """The file line of each line of `text()` (None for the omission marker)."""
        marker: tuple[int | None, ...] = (None,) if self.omitted else ()
        return (*self.head_numbers, *marker, *self.tail_numbers)


@dataclass
class TracebackRecord(Record):
    state: str = "frames"  # frames | exc | chain
    frames: list[tuple[str, int, str]] = field(default_factory=list)
    frames_tail: deque[tuple[str, int, str]] = field(
        default_factory=lambda: deque(maxlen=MAX_FRAMES // 2)
    )
    frames_dropped: int = 0
    exc_type: str | None = None
    exc_message: str | None = None
    # (type, message) of each link before the last, earliest first
    earlier: list[tuple[str | None, str | None]] = field(default_factory=list)
    cont: int = 0
    blanks: int = 0
    headerless: bool = False
    indent: int = 0  # a pasted traceback indented as a whole (markdown code block)
    last_was_code: bool = False  # the last frames line was a frame's source line
    pasted: bool = False  # pasted text (`triage explain`): lenient about trimmed exception lines
    # lines torch and NCCL append to a message unindented (`rules/log_shapes.yaml`)
    tails: tuple[str, ...] = ()

    def frame(self, f: tuple[str, int, str]) -> None:
        if len(self.frames) < MAX_FRAMES // 2:
            self.frames.append(f)
            return
        if len(self.frames_tail) == self.frames_tail.maxlen:
            self.frames_dropped += 1
        self.frames_tail.append(f)

    def feed(self, number: int, text: str) -> int:
        if self.indent and text[: self.indent].isspace():
            text = text[self.indent :]
        stripped = text.strip()
        if self.state == "frames":
            if not stripped:
                self.blanks += 1
                return CONSUMED if self.blanks <= 2 else CLOSE
            self.blanks = 0
            m = TB_FILE.match(text)
            if m is None and self.headerless and not self.frames and not self.head:
                m = TB_CUT_FILE.match(text)  # the paste's first frame, cut mid-path
            if m is not None:
                self.frame((m["file"], int(m["line"]), (m["func"] or "").strip()))
                self.add(number, text)
                self.last_was_code = False
                return CONSUMED
            if text[:1].isspace():
                self.add(number, text)
                self.last_was_code = True
                return CONSUMED
            if TB_HEADER.match(text):
                return CLOSE  # a new traceback: this one was cut short
            m = EXC_LINE.match(text)
            if (
                m is not None
                and not _looks_structured(text)
                and (self.pasted or not _counts_progress(m["type"], m["msg"]))
            ):
                self._exception(m["type"], m["msg"])
                self.state = "exc"
                self.add(number, text)
                return CONSUMED
            if self.last_was_code and self.pasted and not _looks_structured(text):
                # a paste trimmed to the message: `Foo.__init__() takes 2 arguments but 5 ...`
                # (not in big logs, where another process's line may land here)
                self.exc_message = stripped
                self.state = "exc"
                self.add(number, text)
                return CONSUMED
            return FOREIGN
        if self.state == "exc":
            if not stripped:
                self.blanks += 1
                return CONSUMED if self.blanks <= 2 else CLOSE
            if CHAIN.match(stripped):
                self.earlier.append((self.exc_type, self.exc_message))
                self.state = "chain"
                self.blanks = 0
                self.add(number, text)
                return CONSUMED
            if self.blanks == 0 and self.cont < 40 and self._continues(text):
                self.cont += 1
                if self.exc_message is not None and len(self.exc_message) < 4000:
                    self.exc_message = f"{self.exc_message}\n{stripped}"
                self.add(number, text)
                return CONSUMED
            return CLOSE
        # chain: waiting for the next traceback of the chain
        if not stripped:
            return CONSUMED
        if TB_HEADER.match(text) or TB_FILE.match(text):
            self.state = "frames"
            self.cont = self.blanks = 0
            if TB_FILE.match(text):
                return self.feed(number, text)
            self.add(number, text)
            return CONSUMED
        return CLOSE

    def _continues(self, text: str) -> bool:
        if BORDER.match(text) or TB_HEADER.match(text) or _looks_structured(text):
            return False
        if text[:1].isspace() or text.startswith(self.tails) or self.pre.excepthook:
            # the hook writes one exception's whole print with its prefix on each line: a
            # prefixed line of this stream is the message going on, whatever it starts with
            return True
        last = self.tail[-1] if self.tail else (self.head[-1] if self.head else "")
        return last.rstrip().endswith(":") and not text.startswith("[")

    def _exception(self, exc_type: str, msg: str | None) -> None:
        self.exc_type = exc_type
        self.exc_message = (msg or "").strip()

    def all_frames(self) -> list[tuple[str, int, str]]:
        return self.frames + list(self.frames_tail)

    @property
    def logging_call_stack(self) -> bool:
        """The stack Python's logging prints after a log record it could not handle: frames
        with no `Traceback` header, then `Message: %r` and `Arguments: %s`
        (logging/__init__.py, Handler.handleError): where the log call was, not an exception."""
        return (
            self.headerless
            and self.exc_type == "Message"
            and (self.exc_message or "")[:1] in ("'", '"')
        )


@dataclass
class CppExceptionRecord(Record):
    cls: str | None = None
    what: str | None = None
    raised_from: str | None = None
    frame_count: int = 0
    cont: int = 0

    def feed(self, number: int, text: str) -> int:
        stripped = text.strip()
        if not stripped:
            return CLOSE if self.what is not None or self.frame_count else CONSUMED
        m = WHAT.match(text)
        if m is not None and self.what is None:
            self.what = m["what"].strip()
            at = NATIVE_AT.match(self.what)
            if at is not None and self.raised_from is None:
                self.raised_from = at["loc"]  # the library's own check says where it threw
            self.add(number, text)
            return CONSUMED
        m = RAISED_FROM.match(stripped)
        if m is not None:
            self.raised_from = f"{m['func']} at {m['loc']}"
            self.add(number, text)
            return CONSUMED
        if CPP_FRAME.match(stripped):
            self.frame_count += 1
            if self.frame_count <= 12:
                self.add(number, text)
            else:
                self.last_line = number
            return CONSUMED
        if self.what is not None and not self.frame_count and self.cont < 20:
            if _looks_structured(text) or TB_HEADER.match(text) or TAGGED_RECORD.match(text):
                return CLOSE
            self.cont += 1
            self.what = f"{self.what}\n{stripped}"
            self.add(number, text)
            return CONSUMED
        return CLOSE


@dataclass
class FaultHandlerRecord(Record):
    """`Fatal Python error: Segmentation fault` and the thread stacks faulthandler prints."""

    what: str = ""
    frames: list[tuple[str, int, str]] = field(default_factory=list)
    blanks: int = 0

    def feed(self, number: int, text: str) -> int:
        stripped = text.strip()
        if not stripped:
            self.blanks += 1
            return CONSUMED if self.blanks <= 2 else CLOSE
        self.blanks = 0
        m = TB_FILE.match(text)
        if m is not None:
            if len(self.frames) < MAX_FRAMES:
                self.frames.append((m["file"], int(m["line"]), (m["func"] or "").strip()))
            self.add(number, text)
            return CONSUMED
        if FAULT_THREAD.match(stripped) or stripped.startswith("Extension modules:"):
            self.add(number, text[:300])
            return CONSUMED
        return CLOSE


@dataclass
class CppTailRecord(Record):
    """`Exception raised from ...` + `frame #N` lines after a c10 error line: added to it."""

    event_index: int = -1
    raised_from: str | None = None
    frame_count: int = 0

    def feed(self, number: int, text: str) -> int:
        stripped = text.strip()
        m = RAISED_FROM.match(stripped)
        if m is not None and self.raised_from is None:
            self.raised_from = f"{m['func']} at {m['loc']}"
            self.add(number, text)
            return CONSUMED
        if CPP_FRAME.match(stripped):
            self.frame_count += 1
            if self.frame_count <= 8:
                self.add(number, text)
            else:
                self.last_line = number
            return CONSUMED
        return CLOSE


@dataclass
class _SummaryEntry:
    idx: int
    root: bool
    start: int
    end: int
    lines: list[str] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    traceback: list[str] = field(default_factory=list)


@dataclass
class SummaryRecord(Record):
    """torchrun's ChildFailedError table (formats.md §2.1.1)."""

    title: str | None = None
    section: str = "failures"
    entry: _SummaryEntry | None = None
    done: list[_SummaryEntry] = field(default_factory=list)
    in_traceback: bool = False
    headed: bool = False  # a `Failures:` or `Root Cause` header was seen: a real table

    def _finish(self) -> None:
        if self.entry is not None and len(self.done) < 4096:
            self.done.append(self.entry)
        self.entry = None
        self.in_traceback = False

    def feed(self, number: int, text: str) -> int:
        self.last_line = number
        m = BORDER.match(text)
        if m is not None:
            self._finish()
            if m["ch"] == "=" and self.done:
                return DONE
            return CONSUMED
        stripped = text.strip()
        if stripped == "Failures:":
            self._finish()
            self.section = "failures"
            self.headed = True
            return CONSUMED
        if stripped.startswith("Root Cause (first observed failure)"):
            self._finish()
            self.section = "root"
            self.headed = True
            return CONSUMED
        if stripped == "<NO_OTHER_FAILURES>":
            return CONSUMED
        m = SUMMARY_IDX.match(text)
        if m is not None:
            self._finish()
            self.entry = _SummaryEntry(int(m["idx"]), self.section == "root", number, number)
            self.entry.lines.append(text)
            return CONSUMED
        if (
            self.entry is None
            and self.title is None
            and "FAILED" in text
            and SUMMARY_TITLE.match(text)
        ):
            self.title = stripped
            return CONSUMED
        if self.entry is not None:
            m = SUMMARY_FIELD.match(text)
            if m is not None:
                self.in_traceback = m["key"] == "traceback"
                self.entry.fields[m["key"]] = m["value"].rstrip()
                if self.in_traceback:
                    self.entry.traceback.append(m["value"].rstrip())
                self._entry_line(number, text)
                return CONSUMED
            if self.in_traceback and (text.startswith("  ") or not stripped):
                if len(self.entry.traceback) < 400:
                    self.entry.traceback.append(text[4:] if text.startswith("    ") else text[2:])
                self._entry_line(number, text)
                return CONSUMED
        if not stripped:
            return CONSUMED
        self._finish()
        return CLOSE

    def _entry_line(self, number: int, text: str) -> None:
        assert self.entry is not None
        self.entry.end = number
        if len(self.entry.lines) < 40:
            self.entry.lines.append(text)


# the endings of Python's exception class names (`ValueError`, `KeyboardInterrupt`,
# `SystemExit`, `StopIteration`, `OutOfMemoryError`, `CudaFault`, `BackendCompilerFailed`)
_EXCEPTION_NAME = re.compile(
    r"(?:Error|Exception|Interrupt|Exit|Warning|Iteration|Fault|Failure|Failed|Timeout)$"
)


def _counts_progress(exc_type: str, message: str | None) -> bool:
    """Another stream's line that landed between a traceback's frames and its exception (a
    loop's `Step: 99 (0) | Loss: 1.30` printed to stdout while stderr held the traceback): a
    bare word that names no exception class, followed by a count. The traceback's own
    exception line comes after it."""
    return (
        "." not in exc_type
        and _EXCEPTION_NAME.search(exc_type) is None
        and message is not None
        and message[:1].isdigit()
    )


def _looks_structured(text: str) -> bool:
    """A line that is its own record (log-formatted, NCCL), never part of a traceback."""
    head = text[:40]
    if head.startswith("[") and (
        ts.C10_RE.match(text)
        or OLD_C10.match(text)
        or DEEPSPEED.match(text)
        or NEMO.match(text)
        or ts.parse_dated(head) is not None
    ):
        return True
    if ts.GLOG_RE.match(text) or PYLOG.match(text) or LIBFABRIC.match(text) or UCX.match(text):
        return True
    if head[:1].isdigit() and ts.parse_dated(head) is not None:
        return True
    return "NCCL" in text and parse_nccl_line(text) is not None
