"""TORCHELASTIC_ERROR_FILE (error.json): how one worker died, as recorded by `@record`.

Three shapes are read (formats.md §2.1.2, torch `ErrorHandler` / `ProcessFailure`):

* worker file: `{"message": {"message": "OutOfMemoryError: ...",
  "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1767607928"}}}`;
* the agent's copy of the root-cause file: the same plus `message.errorCode` (the exit code),
  sometimes re-dumped with indent=2;
* legacy/custom: `{"message": "text", "timestamp": 1767607928}`.

Output: one ELASTIC_ERROR event (payload RankExit) and, when the file holds a Python call
stack, one TRACEBACK event with it, so rules read it like any traceback in a rank log.
"""

from __future__ import annotations

import json
import signal
from typing import Any

from triage import regex_cache
from triage.model import Event, EventKind, Level, ParsedSource, RaisedException, RankExit, Source
from triage.parsers.common import input_warning, parser_stopped

__all__ = ["MAX_BYTES", "exception_of", "parse"]

MAX_BYTES = 32 * 1024 * 1024  # a traceback with a huge message is still far below this

_NO_STACK = frozenset({"", "NoneType: None", "<N/A>", "None"})
_EXC_LINE = regex_cache.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:\[[^\]]*\])?): ?(?P<msg>.*)$")
_BARE_EXC = regex_cache.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit))$")


def parse(source: Source) -> ParsedSource:
    """Parse one error.json; never raises."""
    warnings: list[str] = []
    try:
        with source.open() as stream:
            data = stream.read(MAX_BYTES + 1)
    except Exception as exc:
        return _failed(source, f"cannot read elastic error file: {exc}", 0)
    if len(data) > MAX_BYTES:
        return _failed(source, f"elastic error file is over {MAX_BYTES} bytes; not read", 0)
    text = data.decode("utf-8", errors="replace")
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    if not text.strip():
        # A worker killed while writing leaves an empty file: worth saying.
        return _failed(source, "elastic error file is empty (the worker died while writing?)", 0)
    try:
        raw: Any = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return _failed(
            source, f"elastic error file is truncated or not JSON ({len(data)} bytes): {exc}", lines
        )
    try:
        events = _events(source, raw, warnings)
    except Exception as exc:  # a shape torch never wrote; report, do not crash
        return _failed(source, parser_stopped("elastic error", exc), lines)
    if not events:
        return _failed(source, warnings[-1] if warnings else "no error in this file", lines)
    return ParsedSource(
        source=source,
        events=tuple(events),
        warnings=tuple(warnings),
        lines=lines,
        bytes_read=len(data),
    )


def exception_of(callstack: str) -> tuple[str | None, str | None]:
    """(exception type, message) of a formatted traceback: the exception after its last frame.

    Multi-line messages are kept whole; with chained exceptions the last one wins.
    """
    lines = callstack.rstrip().splitlines()
    last_frame = max((i for i, line in enumerate(lines) if line.startswith("  File ")), default=-1)
    for index in range(last_frame + 1, len(lines)):
        line = lines[index]
        if not line or line.startswith((" ", "\t")):
            continue  # the frame's code line, `^^^^` markers
        if m := _EXC_LINE.match(line):
            rest = [m["msg"], *lines[index + 1 :]]
            return m["type"], "\n".join(rest).strip()
        if m := _BARE_EXC.match(line):
            return m["type"], ""
        break
    last = next((line for line in reversed(lines) if line.strip()), "")
    if m := _EXC_LINE.match(last.strip()):
        return m["type"], m["msg"].strip()
    return None, last.strip() or None


def _events(source: Source, raw: Any, warnings: list[str]) -> list[Event]:
    if not isinstance(raw, dict):
        warnings.append(f"elastic error file is a JSON {type(raw).__name__}, not an object")
        return []
    message_field = raw.get("message")
    callstack: str | None = None
    error_code: int | None = None
    if isinstance(message_field, dict):
        schema = "agent" if "errorCode" in message_field else "worker"
        message = message_field.get("message")
        extra = message_field.get("extraInfo")
        extra = extra if isinstance(extra, dict) else {}
        stack = extra.get("py_callstack")
        # format_exc() outside an except block gives "NoneType: None": no stack to show.
        callstack = stack if isinstance(stack, str) and stack.strip() not in _NO_STACK else None
        timestamp = _epoch(extra.get("timestamp"))
        code = message_field.get("errorCode")
        error_code = code if type(code) is int else None
    elif isinstance(message_field, str):
        schema = "legacy"
        message = message_field
        timestamp = _epoch(raw.get("timestamp"))
    else:
        warnings.append("elastic error file has no 'message' (string or object)")
        return []
    if not isinstance(message, str):
        message = None
        warnings.append("elastic error file's message.message is missing or not a string")

    exc_type, exc_message = _split_message(message)
    stack_type, stack_message = exception_of(callstack) if callstack else (None, None)
    if callstack is not None:
        # The callstack names the class with its module (torch.OutOfMemoryError); the
        # message only says OutOfMemoryError. Prefer the fuller one.
        exc_type = stack_type or exc_type
        exc_message = exc_message if exc_message else stack_message

    signal_name = None
    if error_code is not None and error_code < 0:  # the agent records -N for "killed by N"
        try:
            signal_name = signal.Signals(-error_code).name
        except ValueError:
            signal_name = None
    exit_record = RankExit(
        rank=source.rank,
        local_rank=source.local_rank,
        host=source.host,
        pid=None,
        exitcode=error_code,
        signal=signal_name,
        time=timestamp,
        error_file=source.path,
        message=message,
        # torch writes `int(time.time())`: a stamp to the second
        time_resolution=1.0 if timestamp is not None and timestamp.is_integer() else 0.0,
    )
    attrs: dict[str, Any] = {"schema": schema, "has_callstack": callstack is not None}
    traits = raw.get("errorTraits")
    if isinstance(traits, dict):
        attrs["error_traits"] = {str(k): str(v) for k, v in traits.items()}
    events = [
        Event(
            source=source.path,
            kind=EventKind.ELASTIC_ERROR,
            text=message or (f"{exc_type}: {exc_message}" if exc_type else "worker failed"),
            line=None,  # the message is a JSON field: no line of the file holds it as shown
            rank=source.rank,
            local_rank=source.local_rank,
            host=source.host,
            time=timestamp,
            level=Level.ERROR,
            attrs=attrs,
            payload=exit_record,
            exception=RaisedException(exc_type, exc_message),
        )
    ]
    if callstack is not None:
        events.append(
            Event(
                source=source.path,
                kind=EventKind.TRACEBACK,
                text=callstack.rstrip("\n"),
                line=None,
                rank=source.rank,
                local_rank=source.local_rank,
                host=source.host,
                time=timestamp,
                level=Level.ERROR,
                attrs={"origin": "elastic_error_file"},
                exception=RaisedException(stack_type, stack_message),
            )
        )
    return events


def _split_message(message: str | None) -> tuple[str | None, str | None]:
    """`OutOfMemoryError: CUDA out of memory...` -> ("OutOfMemoryError", "CUDA out of ...")."""
    if not message:
        return None, None
    first, _, _ = message.partition("\n")
    if m := _EXC_LINE.match(first):
        return m["type"], message[len(m["type"]) :].lstrip(": ").strip()
    return None, message.strip()


def _epoch(value: Any) -> float | None:
    """Epoch seconds from the string (worker file) or number (legacy) form; 0 means unknown."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str) and len(value) < 32:
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    # Reject values no real clock gives (0, negative, or milliseconds/ns by mistake).
    return number if 0 < number < 1e11 else None


def _failed(source: Source, why: str, lines: int) -> ParsedSource:
    event = input_warning(source, why, "elastic_error")
    return ParsedSource(source=source, events=(event,), warnings=(why,), lines=lines)
