"""A printed Python traceback split into its chained links: each link's exception line, its
frames and where it begins in the text.

The log parser types its traceback events with this (`Event.traceback`); a traceback that
arrives as text inside another record (an error file's message, a torchrun summary) is split
the same way, so every stage reads one reading of a chain.
"""

from __future__ import annotations

from collections.abc import Sequence

import regex

from triage import regex_cache
from triage.model import Traceback, TracebackFrame, TracebackLink

# A line that names an exception: `RuntimeError: boom`, `torch.distributed.DistBackendError`
EXCEPTION_LINE = regex_cache.compile(
    r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Exit|Failure|Warning)\b.*$"
)
# Python's chained tracebacks: the earlier exception is printed first, then one of these
_CHAIN_SEPARATOR = regex_cache.compile(
    r"^[^\n]*?(?:During handling of the above exception, another exception occurred:"
    r"|The above exception was the direct cause of the following exception:)[ \t]*$",
    regex.M,
)
_FRAME = regex_cache.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')


def read(text: str, exceptions: Sequence[tuple[str | None, str | None]] | None = None) -> Traceback:
    """The typed traceback of `text`, its links earliest first (one for a traceback without a
    chain).

    `exceptions`: the (type, message) of each link as the caller's own reading found them (the
    log parser's, line by line); without them, or where they do not line up with the links of
    the text (a link in the omitted middle of a long traceback), a link's type and message
    come from its exception line, except the last link's, which the caller read last.
    """
    parts = _CHAIN_SEPARATOR.split(text)
    starts = [0, *(text.count("\n", 0, m.start()) for m in _CHAIN_SEPARATOR.finditer(text))]
    lines = [final_exception_line(part) for part in parts]
    named = [_named(line) for line in lines]
    if exceptions:
        if len(exceptions) == len(parts):
            named = list(exceptions)
        else:
            named[-1] = exceptions[-1]
    return Traceback(
        links=tuple(
            TracebackLink(
                exc_type=exc_type,
                exc_message=exc_message,
                exception_line=line,
                frames=tuple(
                    TracebackFrame(m["file"], int(m["line"]), m["func"])
                    for row in part.splitlines()
                    if (m := _FRAME.match(row))
                ),
                start=start,
            )
            for part, start, line, (exc_type, exc_message) in zip(
                parts, starts, lines, named, strict=True
            )
        )
    )


def _named(line: str | None) -> tuple[str | None, str | None]:
    """(type, message) of an exception line: `RuntimeError: boom` -> ("RuntimeError", "boom")."""
    if line is None:
        return None, None
    exc_type, _, message = line.partition(":")
    return exc_type.strip(), message.strip() or None


def final_exception_line(text: str) -> str | None:
    """The last `SomeError: message` line of a traceback: what finally went wrong."""
    for line in reversed(text.splitlines()):
        s = line.strip()
        if EXCEPTION_LINE.match(s) and not s.startswith("File "):
            return s
    return None


# A frame line as Python prints it, and one a paste cut mid-path (its `File "` lost:
# `ckages/deepspeed/runtime/engine.py", line 468, in __getattr__`)
_FRAME_FILE = regex_cache.compile(r'File "(?P<file>[^"\n]*)", line \d')
_CUT_FRAME_FILE = regex_cache.compile(r'^[ \t]*+(?P<file>[^\s"]+)", line \d')
_CODE_LINE = regex_cache.compile(r'^[ \t](?![ \t]*File ")')  # a frame's source or caret line
MAX_CODE_LINES = 6  # lines a frame prints below itself: its source, carets, a hint


def raising_file(text: str, at: int) -> tuple[str, bool] | None:
    """The file of the frame printed right above the line that holds offset `at` (an exception
    line): where that exception was raised. Its source and caret lines may lie between; any
    other line means the line has no frame of its own. The flag says the frame line was cut
    mid-path (the file is the part of its path the paste kept)."""
    end = text.rfind("\n", 0, at)
    for _ in range(MAX_CODE_LINES + 1):
        if end < 0:
            return None
        start = text.rfind("\n", 0, end) + 1
        line = text[start:end]
        if m := _FRAME_FILE.search(line):
            return m["file"], False
        if m := _CUT_FRAME_FILE.match(line):
            return m["file"], True
        if not _CODE_LINE.match(line):
            return None
        end = start - 1
    return None
