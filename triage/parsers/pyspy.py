"""py-spy dumps: `py-spy dump --pid P` text (with --locals, --native, --subprocesses) and --json.

Each dumped process becomes one PYSPY event whose payload is a `PySpyDump` and whose text is
the main thread's stack exactly as py-spy prints it, so rules can match frames with a regex.
When py-spy could not attach (ptrace refused, no SYS_PTRACE in Docker, interpreter not found,
process gone) the file holds an error instead of a stack: that becomes an INPUT_WARNING event
that says the dump failed and why, since "why is the dump missing" is itself useful evidence.

Layout facts (formats.md §5, py-spy 0.4 src/dump.rs): `Process PID: cmdline`, `Python vX (exe)`,
an optional `Parent Process PID: cmdline` for --subprocesses children (blocks separated by a
dashed rule), then `Thread TID (idle|active|active+gil): "name"` and frames at 4 spaces,
innermost first; --locals adds `Arguments:`/`Locals:` at 8 spaces and values at 12.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import regex

from triage import regex_cache
from triage.formats import (
    PYSPY_NATIVE_FRAME,
    PYSPY_PROCESS,
    PYSPY_PY_FRAME,
    PYSPY_PYTHON,
    PYSPY_THREAD,
)
from triage.model import (
    Event,
    EventKind,
    Level,
    ParsedSource,
    PySpyDump,
    PySpyThread,
    Source,
    StackFrame,
)
from triage.parsers.common import input_warning, parser_stopped

__all__ = ["MAX_BYTES", "parse"]

MAX_BYTES = 64 * 1024 * 1024  # a dump of 4,096 threads x 4,096 frames is far below this
_MAX_FRAMES = 4096  # py-spy's own cap per thread

_ANSI = regex_cache.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PROCESS = PYSPY_PROCESS
_PYTHON = PYSPY_PYTHON
_PARENT = regex_cache.compile(r"^Parent Process (?P<pid>\d+): ?(?P<cmd>.*)$")
_THREAD = PYSPY_THREAD
_PY_FRAME = PYSPY_PY_FRAME
_NATIVE_FRAME = PYSPY_NATIVE_FRAME
_RULE = regex_cache.compile(r"^-{10,}$")

# What py-spy prints when it cannot attach (strings from the py-spy 0.4.3 binary and
# benfred/py-spy#12, #285, #459, #612), with a short reason and the usual fix.
_FAILURES: tuple[tuple[regex.Pattern[str], str, str], ...] = (
    (
        regex_cache.compile(r"SYS_PTRACE"),
        "no_ptrace_capability",
        "the container lacks the SYS_PTRACE capability "
        "(run it with `--cap-add SYS_PTRACE`, or run py-spy on the host)",
    ),
    (
        regex_cache.compile(r"Permission Denied|Permission denied"),
        "permission_denied",
        'ptrace was refused (run py-spy as root, e.g. `sudo env "PATH=$PATH" py-spy dump`, '
        "or lower kernel.yama.ptrace_scope)",
    ),
    (
        regex_cache.compile(r"Operation not permitted"),
        "not_permitted",
        "the kernel or container runtime forbids ptrace here (Operation not permitted)",
    ),
    (
        regex_cache.compile(r"Failed to find a python interpreter"),
        "no_interpreter",
        "py-spy could not find the Python interpreter in the target (a Python version or "
        "build it does not know, or a different mount namespace)",
    ),
    (
        regex_cache.compile(r"Check that the process is running|No such process"),
        "process_gone",
        "the process was no longer running when py-spy attached",
    ),
)
_GENERIC_ERROR = regex_cache.compile(r"^Error: (?P<msg>.+)$")


@dataclass
class _Process:
    pid: int | None
    command: str | None
    line: int
    python_version: str | None = None
    parent_pid: int | None = None
    end_line: int = 0
    threads: list[PySpyThread] = field(default_factory=list)


@dataclass
class _Thread:
    thread_id: str
    status: str
    name: str | None
    frames: list[StackFrame] = field(default_factory=list)


def parse(source: Source) -> ParsedSource:
    """Parse one py-spy dump file (text or JSON); never raises."""
    warnings: list[str] = []
    try:
        with source.open() as stream:
            data = stream.read(MAX_BYTES + 1)
    except Exception as exc:
        return _result(source, [_warning_event(source, f"cannot read py-spy dump: {exc}")], 0, 0)
    if len(data) > MAX_BYTES:
        warnings.append(f"py-spy dump is over {MAX_BYTES} bytes; only the start was read")
        data = data[:MAX_BYTES]
    try:
        text = data.decode("utf-8", errors="replace")
        stripped = text.lstrip()
        if stripped.startswith("[") or stripped.startswith("{"):
            events, lines = _parse_json(source, stripped, warnings)
        else:
            events, lines = _parse_text(source, text.splitlines(), warnings)
    except Exception as exc:  # the promise is "never raises"; say what broke
        events, lines = [], 0
        warnings.append(parser_stopped("py-spy", exc))
    if not events:
        why = "no py-spy stack found in this file"
        if not warnings:
            warnings.append(why)
        events = [_warning_event(source, warnings[-1])]
    return _result(source, events, lines, len(data), warnings)


def stacks_in_text(source: Source, text: str) -> list[Event]:
    """The py-spy dumps a log or a note holds among other lines (an issue body or a training
    diary with dumps in Markdown fences or `<details>`): their PYSPY events alone."""
    events, _ = _parse_text(source, text.splitlines(), [])
    return [ev for ev in events if ev.kind is EventKind.PYSPY]


# --------------------------------------------------------------------------- text


def _parse_text(source: Source, lines: list[str], warnings: list[str]) -> tuple[list[Event], int]:
    processes: list[_Process] = []
    failures: list[Event] = []
    proc: _Process | None = None
    thread: _Thread | None = None

    def close_thread() -> None:
        nonlocal thread
        if thread is not None and proc is not None:
            proc.threads.append(_freeze_thread(thread))
        thread = None

    for number, raw in enumerate(lines, start=1):
        line = _ANSI.sub("", raw).rstrip("\r\n")
        if line.startswith("    "):
            if thread is None or line.startswith("        "):
                continue  # --locals blocks (8 and 12 spaces) and stray indented text
            frame = _text_frame(line)
            if frame is not None:
                if len(thread.frames) < _MAX_FRAMES:
                    thread.frames.append(frame)
                if proc is not None:
                    proc.end_line = number
            continue
        if not line.strip() or _RULE.match(line):
            continue
        if m := _PROCESS.match(line):
            close_thread()
            proc = _Process(pid=int(m["pid"]), command=m["cmd"] or None, line=number)
            proc.end_line = number
            processes.append(proc)
            continue
        if m := _THREAD.match(line):
            close_thread()
            if proc is None:  # a stack pasted without its header: still worth reading
                proc = _Process(pid=None, command=None, line=number)
                processes.append(proc)
            thread = _Thread(m["tid"], m["status"] or "unknown", m["name"])
            proc.end_line = number
            continue
        if proc is not None and (m := _PYTHON.match(line)):
            proc.python_version = m["ver"]
            continue
        if proc is not None and (m := _PARENT.match(line)):
            proc.parent_pid = int(m["pid"])
            continue
        failure = _failure(source, line, number)
        if failure is not None:
            close_thread()
            failures.append(failure)
    close_thread()

    events = [_process_event(source, p, index) for index, p in enumerate(processes)]
    return _dedupe(failures) + events, len(lines)


def _text_frame(line: str) -> StackFrame | None:
    if m := _PY_FRAME.match(line):
        return StackFrame(function=m["func"], filename=m["file"], line=int(m["line"]))
    if m := _NATIVE_FRAME.match(line):
        return StackFrame(function=m["func"], filename=m["file"], line=None)
    return None


def _failure(source: Source, line: str, number: int) -> Event | None:
    for pattern, code, why in _FAILURES:
        if pattern.search(line):
            return _warning_event(
                source, f"py-spy could not dump the process: {why}", number, line, code
            )
    if m := _GENERIC_ERROR.match(line):
        return _warning_event(
            source, f"py-spy could not dump the process: {m['msg']}", number, line, "error"
        )
    return None


def _dedupe(events: list[Event]) -> list[Event]:
    # py-spy prints "Permission Denied" and then the docker hint: one failure, keep the
    # most specific explanation (the first pattern in _FAILURES order that matched).
    if len(events) <= 1:
        return events
    order = {code: i for i, (_, code, _) in enumerate(_FAILURES)}
    best = min(events, key=lambda e: order.get(str(e.attrs.get("failure")), len(order)))
    return [best]


# --------------------------------------------------------------------------- json


def _parse_json(source: Source, text: str, warnings: list[str]) -> tuple[list[Event], int]:
    try:
        raw: Any = json.loads(text)
    except (ValueError, RecursionError) as exc:
        warnings.append(f"py-spy JSON is truncated or corrupt: {exc}")
        return [], text.count("\n") + 1
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        warnings.append(f"py-spy JSON top level is a {type(raw).__name__}, not a list")
        return [], text.count("\n") + 1
    processes: dict[int | None, _Process] = {}
    bad = 0
    for item in raw:
        if not isinstance(item, dict):
            bad += 1
            continue
        pid = item.get("pid")
        pid = pid if type(pid) is int else None
        proc = processes.get(pid)
        if proc is None:
            # a JSON document has no line a stack could be quoted from (0: none)
            proc = processes[pid] = _Process(pid=pid, command=None, line=0)
        info = item.get("process_info")
        if isinstance(info, dict) and isinstance(info.get("command_line"), str):
            proc.command = proc.command or info["command_line"]
            parent = info.get("parent")
            if isinstance(parent, dict) and type(parent.get("pid")) is int:
                proc.parent_pid = parent["pid"]
        thread = _json_thread(item)
        if thread is None:
            bad += 1
            continue
        proc.threads.append(thread)
    if bad:
        warnings.append(f"skipped {bad} py-spy JSON thread records with bad fields")
    events = [
        _process_event(source, p, index) for index, p in enumerate(processes.values()) if p.threads
    ]
    return events, text.count("\n") + 1


def _json_thread(item: dict[str, Any]) -> PySpyThread | None:
    frames_raw = item.get("frames")
    if not isinstance(frames_raw, list):
        return None
    frames: list[StackFrame] = []
    for frame in frames_raw[:_MAX_FRAMES]:
        if not isinstance(frame, dict) or not isinstance(frame.get("name"), str):
            return None
        filename = frame.get("short_filename") or frame.get("filename") or frame.get("module")
        line = frame.get("line")
        frames.append(
            StackFrame(
                function=frame["name"],
                filename=filename if isinstance(filename, str) else "",
                line=line if type(line) is int and line > 0 else None,  # 0: native, no line
            )
        )
    # Same rule as py-spy's text output: the OS thread id when known, else the pthread id.
    os_tid, tid = item.get("os_thread_id"), item.get("thread_id")
    if type(os_tid) is int:
        thread_id = str(os_tid)
    elif type(tid) is int:
        thread_id = f"0x{tid:X}"
    else:
        thread_id = "unknown"
    active, owns_gil = item.get("active"), item.get("owns_gil") is True
    if type(active) is not bool:
        status = "unknown"
    elif not active:
        status = "idle"
    else:
        status = "active+gil" if owns_gil else "active"
    name = item.get("thread_name")
    return PySpyThread(
        thread_id=thread_id,
        name=name if isinstance(name, str) else None,
        status=status,
        owns_gil=owns_gil,
        frames=tuple(frames),
    )


# --------------------------------------------------------------------------- events


def _freeze_thread(thread: _Thread) -> PySpyThread:
    return PySpyThread(
        thread_id=thread.thread_id,
        name=thread.name,
        status=thread.status,
        owns_gil="gil" in thread.status,
        frames=tuple(thread.frames),
    )


def _stack_text(thread: PySpyThread) -> str:
    """The thread as py-spy prints it: header line, then one frame per line."""
    head = f"Thread {thread.thread_id} ({thread.status})"
    if thread.name is not None:
        head += f': "{thread.name}"'
    return "\n".join([head, *(_frame_text(f) for f in thread.frames)])


def _frame_text(frame: StackFrame) -> str:
    if frame.line is None:
        return f"    {frame.function} ({frame.filename})"
    return f"    {frame.function} ({frame.filename}:{frame.line})"


def _process_event(source: Source, proc: _Process, index: int) -> Event:
    dump = PySpyDump(
        pid=proc.pid,
        command=proc.command,
        python_version=proc.python_version,
        threads=tuple(proc.threads),
    )
    main = dump.main_thread()
    top = main.frames[0] if main is not None and main.frames else None
    attrs: dict[str, Any] = {
        "threads": len(dump.threads),
        "command": proc.command,
        "top_function": top.function if top else None,
        "top_file": top.filename if top else None,
    }
    if proc.parent_pid is not None:
        attrs["parent_pid"] = proc.parent_pid
    return Event(
        source=source.path,
        kind=EventKind.PYSPY,
        text=_stack_text(main) if main is not None else f"Process {proc.pid}: no threads",
        line=proc.line or None,
        end_line=max(proc.end_line, proc.line) or None,
        # Later blocks of a --subprocesses dump are children (dataloader workers, or the
        # ranks under a torchrun agent): the file's rank only describes the first one.
        rank=source.rank if index == 0 else None,
        local_rank=source.local_rank if index == 0 else None,
        host=source.host,
        pid=proc.pid,
        level=Level.INFO,
        attrs=attrs,
        payload=dump,
    )


def _warning_event(
    source: Source, text: str, line: int | None = None, raw: str = "", code: str = "unreadable"
) -> Event:
    extra = {"raw": raw} if raw else {}
    return input_warning(source, text, "pyspy", line=line, failure=code, **extra)


def _result(
    source: Source,
    events: Iterable[Event],
    lines: int,
    size: int,
    warnings: list[str] | None = None,
) -> ParsedSource:
    events = tuple(events)
    found = list(warnings or [])
    for event in events:  # a read failure made here is a warning too
        if event.kind is EventKind.INPUT_WARNING and event.text not in found:
            found.append(event.text)
    return ParsedSource(
        source=source, events=events, warnings=tuple(found), lines=lines, bytes_read=size
    )
