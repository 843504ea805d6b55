"""Parsing a big bundle's files in worker processes, and the transport of their results back.

`ParsePool` is offered sources in discovery order and ships them to forked workers in chunks,
once enough bytes are offered to pay for starting them; a worker re-opens each file by path,
parses it with the job's knowledge and budget, and packs the result (flight-recorder entries
as plain columns) for the trip back. What a worker could not do (it died, or passed its
deadline: a hostile flight-recorder pickle can crash or hang the C unpickler) is left for the
caller to parse here, its dumps in a child process (`triage.isolated`).
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from triage.budget import JobBudget
from triage.model import FlightRecorderDump, ParsedSource, Source, SourceKind

if TYPE_CHECKING:
    from concurrent.futures import Future

    from triage.knowledge import Knowledge

# (sources done, bytes done, path now being read)
ProgressCallback = Callable[[int, int, str], None]

# Below this much data on disk, parsing here beats starting workers (~0.2 s per pool): the
# default of `Options.parallel_from_bytes`.
PARALLEL_FROM_BYTES = 32 * 1024 * 1024
# Work handed to a worker at once: big enough to amortize the hand-off, small enough that
# the workers finish together.
_CHUNK_BYTES = 8 * 1024 * 1024
_CHUNK_FILES = 64
# How long a worker or a decoding child may take over a file or a chunk before it is taken
# for stuck (a hostile flight-recorder dump can make the C unpickler run for ever): far more
# than any real file takes, even on a loaded machine (a 2,000-entry dump decodes in ~30 ms).
DECODE_SECONDS = 30.0
DECODE_SECONDS_PER_MIB = 1.0


def decode_allowance(size: int) -> float:
    """Seconds a worker may take over `size` bytes of files before it is stopped."""
    return DECODE_SECONDS + DECODE_SECONDS_PER_MIB * size / (1 << 20)


# What a worker needs to re-create a Source (its `open` is a closure and cannot travel).
_SourceFields = tuple[
    str, str, int, int | None, int | None, str | None, int | None, tuple[str, ...]
]


class ReadProgress:
    """Counts what is done for the on_progress callback."""

    def __init__(self, callback: ProgressCallback | None) -> None:
        self.callback = callback
        self.sources = 0
        self.bytes = 0

    def start(self, path: str) -> None:
        if self.callback is not None:
            self.callback(self.sources, self.bytes, path)

    def done(self, size: int) -> None:
        self.sources += 1
        self.bytes += size


def poolable(source: Source) -> bool:
    from triage.ingest.streams import empty_stream

    # Only plain files on disk can be reopened by path in another process; a source with
    # nothing to read (an archive with problems, an unreadable file) stays here.
    return source.size > 0 and source.open is not empty_stream and os.path.isfile(source.path)


def default_workers() -> int:
    """How many worker processes this process may fork to parse a big bundle (1: none)."""
    import multiprocessing  # here, not at the top: `triage explain` never needs it

    if multiprocessing.parent_process() is not None:
        return 1  # already a worker (the batch runner): its siblings use the other cores
    if threading.active_count() > 1 or not sys.platform.startswith("linux"):
        # Forking a threaded process can deadlock, macOS system libraries do not survive a
        # fork, and the other start methods re-import the caller's main module: read here.
        return 1
    return min(len(os.sched_getaffinity(0)), 8)  # the cores this process may use


# the indices of the sources a worker parses, and its result to come (None: not shipped)
_Chunk = tuple[list[int], "Future[list[tuple[Any, ...] | None]] | None"]


class ParsePool:
    """Worker processes that parse files by path, started once enough bytes are offered.

    Sources are offered in discovery order and shipped in chunks of about _CHUNK_BYTES; until
    `from_bytes` have been offered nothing starts (and a small input never starts it).
    Anything a worker could not do (a file that changed, a result that cannot travel, a
    worker killed by the OS or stopped past its deadline) is left as None in `collect`, for
    the caller to parse here.
    """

    def __init__(
        self,
        job_budget: JobBudget,
        workers: int | None,
        kb: Knowledge,
        from_bytes: int = PARALLEL_FROM_BYTES,
    ) -> None:
        self.job_budget = job_budget
        self.from_bytes = from_bytes
        self.kb = kb  # handed to the workers when they start (`_start_worker`)
        self.workers = workers  # None: `default_workers()` when the pool would start
        self.executor: Any = None
        self.broken = False
        self.waiting: list[tuple[int, Source, int | None]] = []
        self.offered_bytes = 0
        self.chunk: list[tuple[int, Source]] = []
        self.chunk_bytes = 0
        self.chunk_tail: int | None = None
        self.chunks: list[_Chunk] = []
        self.shipped: set[int] = set()
        self.gc_was_enabled = gc.isenabled()

    def offer(self, index: int, source: Source, fr_tail: int | None) -> None:
        self.offered_bytes += source.size
        if self.executor is None:
            self.waiting.append((index, source, fr_tail))
            if self.offered_bytes >= self.from_bytes and not self.broken:
                self._start()
            return
        self._add(index, source, fr_tail)

    def flush(self) -> None:
        if self.executor is not None:
            self._ship()

    @property
    def running(self) -> bool:
        """Whether worker processes were started (and not yet closed)."""
        return self.executor is not None

    def took(self, index: int) -> bool:
        """Whether a worker was handed source `index` (its result comes with `collect`)."""
        return index in self.shipped

    def _start(self) -> None:
        settle()  # an earlier pool's thread still joining its workers: no fork beside it
        workers = default_workers() if self.workers is None else self.workers
        if workers < 2:
            self.broken = True  # parse here; do not ask again for every later source
            return
        # Results arrive as many fresh, acyclic objects (FR entries); the cyclic GC would
        # re-scan all of them again and again meanwhile. Off from here: what the workers need
        # loaded before the fork (numpy, the parsers) is thousands of long-lived objects too,
        # and the collections their making set off walk everything the process holds.
        gc.disable()
        try:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            from triage import parsers

            # what the sources offered so far need (dumps are offered last, once discovery
            # is done: a pool they start knows every kind of the job)
            parsers.preload({source.kind for _, source, _ in self.waiting}, self.kb)
        except BaseException:
            self._restore_gc()
            raise
        try:
            # The workers count against this job's budget: forked, they share its counters.
            self.job_budget.before_fork()
            # Forked, they inherit the initializer's arguments as they are (never pickled):
            # the run's knowledge and the scan tables derived from it in `preload`.
            self.executor = ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_start_worker,
                initargs=(self.job_budget, self.kb),
            )
        except (OSError, RuntimeError):  # no processes to be had: read here
            self.broken = True
            self._restore_gc()
            return
        waiting, self.waiting = self.waiting, []
        for index, source, fr_tail in waiting:
            self._add(index, source, fr_tail)

    def _add(self, index: int, source: Source, fr_tail: int | None) -> None:
        if self.chunk and (
            self.chunk_bytes >= _CHUNK_BYTES
            or len(self.chunk) >= _CHUNK_FILES
            or fr_tail != self.chunk_tail
        ):
            self._ship()
        self.chunk.append((index, source))
        self.chunk_bytes += source.size
        self.chunk_tail = fr_tail

    def _ship(self) -> None:
        if not self.chunk:
            return
        indices = [i for i, _ in self.chunk]
        fields = [_fields(source) for _, source in self.chunk]
        try:
            future = self.executor.submit(_parse_chunk, fields, self.chunk_tail)
        except Exception:  # noqa: BLE001 - a broken pool: these are parsed here
            future = None
        self.chunks.append((indices, future))
        if future is not None:
            self.shipped.update(indices)
        self.chunk, self.chunk_bytes = [], 0

    def collect(
        self, sources: Sequence[Source], results: list[ParsedSource | None], progress: ReadProgress
    ) -> None:
        """Results of the shipped chunks into `results`. A chunk whose worker died or is past
        its deadline (`decode_allowance`, from the previous result) is left None, and once one
        is overdue the workers are killed: the caller parses the rest, its dumps isolated."""
        stopped = False
        since = time.monotonic()
        for k, (indices, future) in enumerate(self.chunks):
            if future is None:
                continue
            progress.start(sources[indices[0]].path)
            self.chunks[k] = (indices, None)  # a done future keeps its result alive
            allowance = decode_allowance(sum(sources[i].size for i in indices))
            try:
                if stopped and not future.done():
                    continue
                packed = future.result(timeout=max(since + allowance - time.monotonic(), 0))
            except TimeoutError:
                self._stop_workers()
                stopped = True
                continue
            except Exception:  # noqa: BLE001 - a lost worker: its share is parsed here
                continue
            finally:
                del future
            since = time.monotonic()
            for n, i in enumerate(indices):
                item, packed[n] = packed[n], None  # the columns go once the entries exist
                if item is not None:
                    results[i] = unpack(sources[i], item)
                    progress.done(sources[i].size)
                del item

    def _stop_workers(self) -> None:
        # A stuck worker may be in C code (a hostile dump's hash) that only a signal stops,
        # and `shutdown` would wait for it for ever. The executor has no public way to stop
        # its processes before Python 3.14 (`kill_workers`).
        for process in list(getattr(self.executor, "_processes", {}).values()):
            process.kill()

    def close(self, wait: bool = True) -> None:
        """Stop the workers. `wait=False` returns while they still exit (~10-40 ms in which
        this process can go on with the diagnosis); `settle` waits for them."""
        if self.executor is not None:
            self.executor.shutdown(wait=wait, cancel_futures=True)
            if not wait:
                _exiting.append(self.executor)
            self.executor = None
            self._restore_gc()

    def _restore_gc(self) -> None:
        if self.gc_was_enabled:
            gc.enable()


# Executors closed without waiting (`ParsePool.close(wait=False)`): their threads still join
# the exiting workers.
_exiting: list[Any] = []


def settle() -> None:
    """Wait until the workers of every pool closed without waiting have exited, and their
    executor's thread with them: this process has no threads of the pools' left after."""
    while _exiting:
        _exiting.pop().shutdown(wait=True)


def _fields(source: Source) -> _SourceFields:
    return (
        source.path,
        source.kind.value,
        source.size,
        source.rank,
        source.local_rank,
        source.host,
        source.attempt,
        source.warnings,
    )


# In a worker process: the knowledge of the job it parses for (`_start_worker`).
_worker_kb: Knowledge | None = None


def _start_worker(job_budget: JobBudget, kb: Knowledge) -> None:
    """The initializer of a job's worker processes: the job's budget and knowledge."""
    from triage import budget

    global _worker_kb
    budget.install(job_budget)
    _worker_kb = kb


def _contain_dumps() -> None:
    """Before a worker decodes its first flight-recorder dump. A worker that dies or passes
    its deadline costs only its chunk, parsed again by the caller with its dumps in
    `triage.isolated`'s child: its dumps need no scan up front. Called then, not when the
    worker starts: importing the dump decoder (pickletools and its tables) costs each worker
    of a job of logs alone ~40 ms before its first file."""
    from triage.parsers import flight_recorder

    flight_recorder.contain_decoding()


def _parse_chunk(chunk: list[_SourceFields], fr_tail: int | None) -> list[tuple[Any, ...] | None]:
    """In a worker: re-open each file, parse it, pack the result for the trip back."""
    from triage import ingest, parsers

    out: list[tuple[Any, ...] | None] = []
    for path, kind, size, rank, local_rank, host, attempt, warnings in chunk:
        if kind == SourceKind.FLIGHT_RECORDER.value:
            _contain_dumps()
        # A plain file is simply opened again; anything else (a compressed file) is
        # discovered again, which gives the very opener ingest chose for it. A file that
        # changed since is left to the main process, which reports it as ingest saw it.
        opener = ingest.reopen_plain(path, size)
        if opener is None:
            found = list(ingest.discover([path]))
            if len(found) != 1 or (found[0].path, found[0].kind.value, found[0].size) != (
                path,
                kind,
                size,
            ):
                out.append(None)
                continue
            opener = found[0].open
        source = Source(
            path=path,
            kind=SourceKind(kind),
            size=size,
            open=opener,
            rank=rank,
            local_rank=local_rank,
            host=host,
            attempt=attempt,
            warnings=warnings,
        )
        # A result that cannot be pickled fails this chunk's future; the main process then
        # parses the chunk itself.
        out.append(pack(parsers.parse(source, fr_tail=fr_tail, kb=_worker_kb)))
    return out


def pack(parsed: ParsedSource) -> tuple[Any, ...]:
    """ParsedSource minus its Source; a dump's flight-recorder entries travel as their
    columnar `EntryTable` (coded columns pickle small and unpickle fast). The dump decoder's
    module is imported for a dump only: a worker that reads logs alone never needs it (~10-30
    ms of each worker's CPU, and as much in the parent for `unpack`)."""
    events = []
    for event in parsed.events:
        payload = event.payload
        if isinstance(payload, FlightRecorderDump):
            from triage.parsers import flight_recorder

            columns = flight_recorder.entry_columns(payload.entries)
            event = replace(event, payload=(replace(payload, entries=()), columns))
        events.append(event)
    return (
        tuple(events),
        parsed.warnings,
        parsed.lines,
        parsed.bytes_read,
        parsed.text_digest,
        parsed.whole_text,
        parsed.source.kind.value,
    )


def unpack(source: Source, item: tuple[Any, ...]) -> ParsedSource:
    events, warnings, lines, bytes_read, digest, whole_text, kind = item
    out = []
    for event in events:
        payload = event.payload
        if type(payload) is tuple:
            from triage.parsers import flight_recorder

            dump, columns = payload
            entries = flight_recorder.entries_from_columns(columns)
            event = replace(event, payload=replace(dump, entries=entries))
        out.append(event)
    return ParsedSource(
        source=replace(source, kind=SourceKind(kind)),  # the kind its parser settled on
        events=tuple(out),
        warnings=warnings,
        lines=lines,
        bytes_read=bytes_read,
        text_digest=digest,
        whole_text=whole_text,
    )
