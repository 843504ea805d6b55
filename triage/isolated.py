"""Decoding pickled flight-recorder dumps in a child process, where a crash or a hang of the
decoder cannot take the run down.

Dumps are untrusted, and CPython's C unpickler can be made to crash or to run for ever inside
`pickle.load`, before any check of ours sees an object: a tuple nested millions deep used as a
dict key is hashed by recursion on the C stack (SIGSEGV), and one that holds a tuple many
times over is hashed 2**64 times. So the pickled dumps a job parses in this process are
decoded in one forked child, which sends each result back through a pipe packed as the worker
pool packs its own (`pool.pack`), and exits. The parent waits for each result with a deadline
(`pool.decode_allowance`). A child that dies by a signal, exits badly or passes the deadline
(it is killed) costs only the dump it was decoding: that dump becomes an input warning that
says what happened, and the dumps after it go to a fresh child. JSON dumps have no such
hazard and are parsed here.

Where `os.fork` cannot be used (not Linux: macOS system libraries do not survive a fork, and
Windows has none), dumps are decoded in this process, as the pool's workers are not forked
there either.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import select
import signal
import sys
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from triage.model import ParsedSource, Source
from triage.pool import ReadProgress, decode_allowance, pack, unpack

if TYPE_CHECKING:
    from triage.knowledge import Knowledge

_LENGTH = 8  # bytes of the length before each packed result on the pipe
_READ_BYTES = 1 << 20


def parse_dumps(
    sources: Sequence[Source], fr_tail: int | None, kb: Knowledge, progress: ReadProgress
) -> list[ParsedSource]:
    """Parse flight-recorder dumps, the pickled ones in child processes; one result a source,
    in order. Each source's temp space (`release`) is given back once it is read."""
    from triage import parsers

    results: list[ParsedSource | None] = [None] * len(sources)
    isolate = hasattr(os, "fork") and sys.platform.startswith("linux")
    pickled = []
    for n, source in enumerate(sources):
        if isolate and _pickled(source):
            pickled.append(n)
        else:
            progress.start(source.path)
            results[n] = _done(source, parsers.parse(source, fr_tail=fr_tail, kb=kb), progress)
    while pickled:
        got, failure = _decode_in_child([sources[n] for n in pickled], fr_tail, kb, progress)
        for n, parsed in zip(pickled, got, strict=False):  # got: the first of them
            results[n] = parsed
        if len(got) == len(pickled):
            break
        bad = pickled[len(got)]  # the dump the child was decoding when it failed
        results[bad] = _done(sources[bad], _not_read(sources[bad], failure), progress)
        pickled = pickled[len(got) + 1 :]
    return [parsed for parsed in results if parsed is not None]


def _pickled(source: Source) -> bool:
    from triage.parsers.flight_recorder import format_of

    if source.size == 0:
        return False  # nothing to decode
    try:
        with source.open() as stream:
            head = stream.read(64)
    except Exception:  # noqa: BLE001 - the child's own reading says what is wrong
        return True
    return format_of(head) == "pickle"


def _decode_in_child(
    sources: Sequence[Source], fr_tail: int | None, kb: Knowledge, progress: ReadProgress
) -> tuple[list[ParsedSource], str]:
    """Decode `sources` in order in one forked child: the results it sent, and (when it sent
    fewer than all) what stopped it on the next one."""
    # loaded here, before the fork: the child must not import (see `_child`)
    from triage import parsers
    from triage.parsers import flight_recorder  # noqa: F401

    read_fd, write_fd = os.pipe()
    try:
        with warnings.catch_warnings():
            # Python 3.12+ warns on forking a threaded process (the CLI's spinner): the child
            # only decodes and exits, taking no lock another thread may hold.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:  # no process to be had: decode here, as before
        os.close(read_fd)
        os.close(write_fd)
        parsed = []
        for source in sources:
            progress.start(source.path)
            parsed.append(_done(source, parsers.parse(source, fr_tail=fr_tail, kb=kb), progress))
        return parsed, ""
    if pid == 0:
        os.close(read_fd)
        _child(write_fd, sources, fr_tail, kb)
    os.close(write_fd)
    got: list[ParsedSource] = []
    overdue = None
    try:
        overdue = _receive(read_fd, sources, fr_tail, kb, got, progress)
    finally:
        os.close(read_fd)
        if len(got) < len(sources):
            _kill(pid)
        _, status = os.waitpid(pid, 0)
    if len(got) == len(sources):
        return got, ""
    return got, overdue or _how_it_ended(status)


def _child(
    write_fd: int, sources: Sequence[Source], fr_tail: int | None, kb: Knowledge
) -> NoReturn:
    """In the forked child: decode, send, exit. Nothing else (no output, no imports, no
    atexit handlers): locks held by the parent's other threads were copied held."""
    code = 1
    try:
        from triage import parsers
        from triage.parsers import flight_recorder

        gc.disable()  # the parent's objects stay shared, not copied page by page
        flight_recorder.count_entries_in_parent()
        flight_recorder.contain_decoding()  # a crash or a hang here costs only this dump
        for source in sources:
            parsed = parsers.parse(source, fr_tail=fr_tail, kb=kb)
            try:
                data = pickle.dumps(pack(parsed), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # noqa: BLE001 - empty: the parent parses it itself
                data = b""
            _write_all(write_fd, len(data).to_bytes(_LENGTH, "little") + data)
        code = 0
    finally:
        os._exit(code)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _receive(
    read_fd: int,
    sources: Sequence[Source],
    fr_tail: int | None,
    kb: Knowledge,
    got: list[ParsedSource],
    progress: ReadProgress,
) -> str | None:
    """Read the child's results into `got` until all came, the pipe closed (None), or the
    one awaited is overdue (why)."""
    from triage import parsers
    from triage.parsers import flight_recorder

    poller = select.poll()
    poller.register(read_fd, select.POLLIN)
    buffer = bytearray()
    while len(got) < len(sources):
        source = sources[len(got)]
        progress.start(source.path)
        allowance = decode_allowance(source.size)
        deadline = time.monotonic() + allowance
        while True:  # until this source's result is in the buffer
            if len(buffer) >= _LENGTH:
                size = int.from_bytes(buffer[:_LENGTH], "little")
                if len(buffer) >= _LENGTH + size:
                    break
            left = deadline - time.monotonic()
            if left <= 0:
                return (
                    f"the flight-recorder pickle decoder did not finish within {allowance:.0f} s "
                    "on this dump (it was stopped); it may be hostile or corrupt; not read"
                )
            if not poller.poll(left * 1000):
                continue
            data = os.read(read_fd, _READ_BYTES)
            if not data:
                return None
            buffer += data
        item = buffer[_LENGTH : _LENGTH + size]
        del buffer[: _LENGTH + size]
        if size:
            # our own child pickled this from the results our parser built: not dump bytes
            parsed = flight_recorder.within_entry_budget(unpack(source, pickle.loads(item)))
        else:  # decoded there, but its result could not travel: decoding it is safe here
            parsed = parsers.parse(source, fr_tail=fr_tail, kb=kb)
        got.append(_done(source, parsed, progress))
    return None


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.kill(pid, signal.SIGKILL)


def _how_it_ended(status: int) -> str:
    # Worded without signal names (SIGSEGV) or "killed": a reader must not take it for a
    # crash of the job's own processes.
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        name = signal.strsignal(number) if number != signal.SIGKILL else None
        what = f"{name.lower()}, signal {number}" if name else f"signal {number}"
        return (
            f"the flight-recorder pickle decoder crashed ({what}) on this dump; it may be "
            "hostile or corrupt; not read"
        )
    return (
        "the flight-recorder pickle decoder stopped (exit status "
        f"{os.waitstatus_to_exitcode(status)}) on this dump; it may be hostile or corrupt; "
        "not read"
    )


def _not_read(source: Source, why: str) -> ParsedSource:
    from triage.parsers import flight_recorder

    return flight_recorder.not_read(source, why)


def _done(source: Source, parsed: ParsedSource, progress: ReadProgress) -> ParsedSource:
    if source.release is not None:
        source.release()  # read: its temp space (a spooled archive member) goes back
    progress.done(source.size)
    return parsed
