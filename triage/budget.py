"""What one job may cost, counted across every process that reads it.

A bundle is untrusted: a 10 MB archive can expand to terabytes, a 256 MB JSON dump of `{}`
entries takes ~7 GB to decode, and a job's files are read by several worker processes at
once. `JobLimits` says how much one job may take; a `JobBudget` counts it in memory shared
with the worker processes (they are forked from the process that made it), so the limits
hold for the job as a whole, not per file or per worker:

* decompressed bytes and seconds spent decompressing (gzip, bzip2, xz, zstd, zip members):
  a bomb is cut by what it costs, not guessed from its compression ratio (real logs of
  repeated lines compress 250:1 and more);
* temp space held at once by archive members copied out of compressed tars (the spool);
* flight-recorder entries kept, and the memory dumps being decoded at the same moment may
  take (estimated from their bytes before decoding).

What trips a limit stops early and says so on that input; the rest of the job is read.

    with budget.job(JobLimits()):      # read_inputs does this around one job
        budget.current().spend_decompressed(n, seconds)
"""

from __future__ import annotations

import contextvars
import mmap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class JobLimits:
    """How much one job may take. The defaults are far above real bundles (a 1,024-rank job
    with 4 GB of logs uses a quarter of them) and far below what a bomb would take."""

    # all compressed inputs of the job together, after decompression
    decompressed_bytes: int = 16 * GIB
    # time spent decompressing, all processes together (a bomb that is slow to expand)
    decompress_seconds: float = 120.0
    # temp space held at once by members copied out of compressed tars
    spool_bytes: int = 2 * GIB
    # flight-recorder entries kept, all dumps together (1,024 ranks x 2,000 is 2 million)
    fr_entries: int = 4_000_000
    # estimated memory of the flight-recorder dumps being decoded at one moment (a real
    # 2,000-entry dump takes ~6 MB; a crafted 60 MB one of empty entries ~1.5 GB)
    fr_decode_bytes: int = 1 * GIB


# slots of the shared counters
_DECOMPRESSED, _DECOMPRESS_NS, _FR_ENTRIES, _DECODING = range(4)


class JobBudget:
    """The counters of one job. Made with `shared=True` in a process that then forks its
    workers (calling `before_fork` first), the counts are one for all of them (a lock and four
    integers in shared memory); otherwise they are this process's alone."""

    def __init__(self, limits: JobLimits = JobLimits(), *, shared: bool = False) -> None:
        self.limits = limits
        self._shareable = shared
        self._counts: Any = [0, 0, 0, 0]
        self._lock: Any = threading.Lock()

    def before_fork(self) -> None:
        """Move the counts into shared memory for the workers about to be forked (a budget
        made with `shared=True`). Done only then: a small job forks none, and a lock shared
        across processes costs its start. Call it from the thread that forks, while no other
        thread counts."""
        if not self._shareable:
            return
        import multiprocessing

        self._shareable = False
        if "fork" not in multiprocessing.get_all_start_methods():
            return
        ctx = multiprocessing.get_context("fork")
        # an anonymous shared mapping, which forked processes share: multiprocessing's
        # RawArray makes a file for its heap first (~3-4 ms of CPU, more on a busy disk)
        counts = memoryview(mmap.mmap(-1, 8 * len(self._counts))).cast("q")
        with self._lock:
            for slot, value in enumerate(self._counts):
                counts[slot] = value
            self._counts, self._lock = counts, ctx.Lock()

    # ------------------------------------------------------------ decompression

    def spend_decompressed(self, nbytes: int, seconds: float) -> str | None:
        """Count `nbytes` produced in `seconds`; why to stop now, if the job is over budget."""
        with self._lock:
            self._counts[_DECOMPRESSED] += nbytes
            self._counts[_DECOMPRESS_NS] += int(seconds * 1e9)
            done, spent = self._counts[_DECOMPRESSED], self._counts[_DECOMPRESS_NS] / 1e9
        if done > self.limits.decompressed_bytes:
            return (
                f"this job's budget of {_size(self.limits.decompressed_bytes)} of decompressed "
                "data (all its compressed inputs together) is used up"
            )
        if spent > self.limits.decompress_seconds:
            return (
                f"this job's budget of {self.limits.decompress_seconds:g} s of decompression "
                "(all its compressed inputs together) is used up"
            )
        return None

    @property
    def decompressed(self) -> int:
        return int(self._counts[_DECOMPRESSED])

    # ------------------------------------------------------------ flight recorder

    def take_fr_entries(self, wanted: int) -> int:
        """Count up to `wanted` entries against the job's budget; how many may be kept."""
        with self._lock:
            left = max(self.limits.fr_entries - self._counts[_FR_ENTRIES], 0)
            granted = min(wanted, left)
            self._counts[_FR_ENTRIES] += granted
        return granted

    @contextmanager
    def decoding(self, estimate: int, *, wait_s: float = 60.0) -> Iterator[bool]:
        """Hold `estimate` bytes of the job's decode budget while a dump is decoded.

        Yields False (holding nothing) when the estimate alone is over the budget: the caller
        must not decode it whole. Otherwise waits while other processes' decodes fill the
        budget (they end), then yields True.
        """
        if estimate > self.limits.fr_decode_bytes:
            yield False
            return
        deadline = time.monotonic() + wait_s
        while True:
            with self._lock:
                busy = self._counts[_DECODING]
                if busy == 0 or busy + estimate <= self.limits.fr_decode_bytes:
                    self._counts[_DECODING] += estimate
                    break
            if time.monotonic() > deadline:  # a worker died holding its share: go on
                with self._lock:
                    self._counts[_DECODING] += estimate
                break
            time.sleep(0.005)
        try:
            yield True
        finally:
            with self._lock:
                self._counts[_DECODING] -= estimate


_CURRENT: contextvars.ContextVar[JobBudget | None] = contextvars.ContextVar(
    "triage_job_budget", default=None
)


def current() -> JobBudget:
    """The budget of the job this thread is reading (a fresh default one outside a job)."""
    found = _CURRENT.get()
    if found is None:
        found = JobBudget()
        _CURRENT.set(found)
    return found


def install(found: JobBudget) -> None:
    """Make `found` this thread's budget: the initializer of a job's worker processes."""
    _CURRENT.set(found)


@contextmanager
def job(limits: JobLimits = JobLimits(), *, shared: bool = False) -> Iterator[JobBudget]:
    """A fresh budget for one job, current in this thread while the job is read."""
    found = JobBudget(limits, shared=shared)
    token = _CURRENT.set(found)
    try:
        yield found
    finally:
        _CURRENT.reset(token)


def _size(n: int) -> str:
    return f"{n / GIB:g} GiB" if n >= GIB else f"{n / MIB:g} MiB"
