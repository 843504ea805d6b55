"""Binary streams behind `Source.open()`: windows into files, spooled archive members, and
capped decompression.

None of them raises on bad data while reading: a corrupt or truncated compressed stream, or
one that trips a limit, simply ends, and the reason is kept in `problem` (see
`stream_problem`). Memory stays bounded: everything is read in chunks.
"""

from __future__ import annotations

import bz2
import functools
import io
import lzma
import os
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from typing import IO, Any, Protocol

CHUNK = 64 * 1024


class _HasProblem(Protocol):
    problem: str | None


def stream_problem(stream: IO[bytes]) -> str | None:
    """Why a stream from `Source.open()` ended early (corrupt data, a limit), if it did.

    Parsers may call this after reading to record a warning; None means it ended normally.
    """
    raw = getattr(stream, "raw", stream)
    return getattr(raw, "problem", None)


class _Reader(io.RawIOBase):
    problem: str | None = None

    def readable(self) -> bool:
        return True


def buffered(raw: io.RawIOBase, size: int = CHUNK) -> IO[bytes]:
    return io.BufferedReader(raw, buffer_size=size)  # type: ignore[arg-type]


class WindowReader(_Reader):
    """`size` bytes of a seekable stream starting at `offset` (a member of a plain tar)."""

    def __init__(self, inner: IO[bytes], offset: int, size: int) -> None:
        self._inner = inner
        self._offset = offset
        self._size = size
        self._pos = 0
        self._synced = False

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + pos)
        self._synced = False
        return self._pos

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        left = self._size - self._pos
        if left <= 0:
            return 0
        if not self._synced:
            self._inner.seek(self._offset + self._pos)
            self._synced = True
        view = memoryview(buf)[: min(len(buf), left)]
        data = self._inner.read(len(view))
        if not data:
            self.problem = "the archive ends inside this member (truncated)"
            self._size = self._pos
            return 0
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


class Spool:
    """One anonymous temp file that holds the members of compressed tars, back to back.

    Compressed tars can only be read front to back, so their members are copied here once
    while the archive is walked; each member's `open()` then reads its slice with `pread`,
    which needs no file descriptor of its own and no shared file position. One spool serves
    a whole `discover()` call (one job), so a folder of 1,000 .tgz files holds one
    descriptor, not 1,000.

    The space it holds is a budget of the job (`limit`): a member is copied only after
    `reserve` grants its size, and `releaser` gives back what a member took once it has been
    read (the file's blocks are freed by punching a hole; once nothing is held, the file is
    cut back to empty), so a job of many archives needs about one member's worth of disk.
    """

    def __init__(self, limit: int = 1 << 62) -> None:
        self._file = tempfile.TemporaryFile(prefix="triage-spool-")  # noqa: SIM115 (lives with the spool)
        self._fd = self._file.fileno()
        self._end = 0
        self._lock = threading.Lock()
        self.limit = limit
        self.held = 0  # bytes reserved and not yet released
        self.peak = 0  # the most held at once

    @property
    def end(self) -> int:
        return self._end

    def reserve(self, size: int) -> bool:
        """Hold `size` bytes of the budget for a member about to be copied; False if over."""
        with self._lock:
            if self.held + size > self.limit:
                return False
            self.held += size
            self.peak = max(self.peak, self.held)
            return True

    def releaser(self, offset: int, size: int, reserved: int) -> Callable[[], None]:
        """A call (safe to repeat) that frees the `size` bytes at `offset` a member took and
        the `reserved` bytes of budget it held."""
        done = False

        def release() -> None:
            nonlocal done
            with self._lock:
                if done:
                    return
                done = True
                self.held = max(self.held - reserved, 0)
                if self.held == 0:
                    os.ftruncate(self._fd, 0)
                    self._end = 0
                else:
                    _punch_hole(self._fd, offset, size)

        return release

    def write(self, data: bytes) -> None:
        with self._lock:
            written = 0
            while written < len(data):
                written += os.pwrite(self._fd, data[written:], self._end + written)
            self._end += len(data)

    def reader(self, offset: int, size: int) -> IO[bytes]:
        return buffered(_SpoolSlice(self, offset, size))

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self._fd, size, offset)


def _punch_hole(fd: int, offset: int, size: int) -> None:
    """Free a span of a file's blocks (Linux; elsewhere the space waits for the file to empty)."""
    fallocate = _fallocate()
    if fallocate is None or size <= 0:
        return
    import ctypes  # loaded by `_fallocate` already

    fallocate(fd, _PUNCH_HOLE | _KEEP_SIZE, ctypes.c_int64(offset), ctypes.c_int64(size))


_PUNCH_HOLE, _KEEP_SIZE = 0x02, 0x01  # FALLOC_FL_PUNCH_HOLE, FALLOC_FL_KEEP_SIZE


@functools.lru_cache(maxsize=1)
def _fallocate() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here: only archives spooled to disk punch holes; others skip its import

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fallocate = libc.fallocate
    except (OSError, AttributeError):
        return None
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fallocate.restype = ctypes.c_int
    return fallocate


class _SpoolSlice(_Reader):
    def __init__(self, spool: Spool, offset: int, size: int) -> None:
        self._spool = spool  # keeps the temp file alive while a stream is open
        self._offset = offset
        self._size = size
        self._pos = 0

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        left = self._size - self._pos
        if left <= 0:
            return 0
        data = self._spool.pread(min(len(buf), left), self._offset + self._pos)
        memoryview(buf)[: len(data)] = data
        self._pos += len(data)
        return len(data)


class _ZlibStream:
    """zlib's decompressobj with the bz2/lzma decompressor interface (gzip or zlib header)."""

    def __init__(self) -> None:
        self._d = zlib.decompressobj(wbits=47)  # 32 + 15: detect a gzip or zlib header

    def decompress(self, data: bytes, max_length: int) -> bytes:
        if self._d.unconsumed_tail:
            data = self._d.unconsumed_tail + data
        return self._d.decompress(data, max_length)

    @property
    def needs_input(self) -> bool:
        return not self._d.unconsumed_tail

    @property
    def eof(self) -> bool:
        return self._d.eof

    @property
    def unused_data(self) -> bytes:
        return self._d.unused_data


class _ZstdStream:
    """zstandard's stream reader behind the bz2/lzma decompressor interface. Its own
    `decompressobj` has no output bound (one input block of a bomb could give gigabytes at
    once); the stream reader hands out at most what is asked. Frames follow one another."""

    def __init__(self, feed: Callable[[], bytes]) -> None:
        import zstandard  # optional: the `zstd` extra

        self._reader = zstandard.ZstdDecompressor().stream_reader(
            _Feed(feed), read_across_frames=True
        )
        self.eof = False
        self.needs_input = False
        self.unused_data = b""

    def decompress(self, data: bytes, max_length: int) -> bytes:
        out = self._reader.read(max_length)
        if not out:
            self.eof = True
        return out


class _Feed(io.RawIOBase):
    """A readable stream over a `feed()` of compressed blocks (b'' at the end)."""

    def __init__(self, feed: Callable[[], bytes]) -> None:
        self._feed = feed

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self._feed()


def zstd_available() -> bool:
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True


_DECOMPRESSORS: dict[str, Callable[[], object]] = {
    "gzip": _ZlibStream,
    "bz2": bz2.BZ2Decompressor,
    "xz": lzma.LZMADecompressor,
}


def _data_errors() -> tuple[type[BaseException], ...]:
    errors: tuple[type[BaseException], ...] = (
        OSError,
        EOFError,
        ValueError,
        zlib.error,
        lzma.LZMAError,
    )
    try:
        import zstandard

        errors += (zstandard.ZstdError,)
    except ImportError:
        pass
    return errors


_FLUSH_BYTES = 1 << 20  # decompressed bytes counted locally before the shared budget hears


class DecompressReader(_Reader):
    """Decompress gzip / bzip2 / xz / zstd (multi-stream) from `inner`, in bounded chunks.

    `in_bytes` / `out_bytes` count compressed bytes read and bytes produced. The stream ends
    (never raises) when the data is corrupt or truncated, after `max_out` bytes, or when the
    job's budget of decompressed bytes or decompression time (`triage.budget`) is used up:
    what a bomb costs stops it, whatever its ratio. `problem` then says why.
    """

    def __init__(self, inner: IO[bytes], codec: str, *, max_out: int) -> None:
        from triage import budget

        self._inner = inner
        self._codec = codec
        self._d = self._decompressor()
        self._max_out = max_out
        self._budget = budget.current()
        self._pending = b""  # input to feed before reading more
        self._out = b""
        self._done = False
        self._streams = 1
        self._unflushed = 0
        self._seconds = 0.0
        self.in_bytes = 0
        self.out_bytes = 0

    def _decompressor(self) -> Any:
        if self._codec == "zstd":
            return _ZstdStream(self._read_inner)
        return _DECOMPRESSORS[self._codec]()

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._out and not self._done:
            self._out = self._next_chunk()
        if not self._out:
            return 0
        n = min(len(buf), len(self._out))
        memoryview(buf)[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def _stop(self, problem: str | None) -> bytes:
        self._done = True
        if problem and self.problem is None:
            self.problem = problem
        if self._unflushed or self._seconds:
            self._flush()
        return b""

    def _next_chunk(self) -> bytes:
        d = self._d
        started = time.perf_counter()
        try:
            if d.eof:
                if self._codec == "zstd":  # the stream reader crossed every frame already
                    return self._stop(None)
                # Concatenated streams (`cat a.gz b.gz`, pbzip2) continue after the first.
                rest = d.unused_data or self._read_inner()
                if not rest.strip(b"\x00"):
                    return self._stop(None)
                self._d = d = self._decompressor()
                self._streams += 1
                self._pending = rest
            if d.needs_input:
                data = self._pending or self._read_inner()
                self._pending = b""
                if not data:
                    return self._stop("the compressed data ends early (truncated file)")
            else:
                data = b""
            out = d.decompress(data, CHUNK)
        except _data_errors() as exc:
            if self._streams > 1:
                return self._stop(None)  # trailing junk after a complete stream
            return self._stop(f"corrupt {self._codec} data ({exc})")
        finally:
            self._seconds += time.perf_counter() - started
        if not out:
            return b""
        self.out_bytes += len(out)
        self._unflushed += len(out)
        if self.out_bytes > self._max_out:
            over = self.out_bytes - self._max_out
            self._stop(f"stopped after {_mib(self._max_out)}: over the size limit")
            return out[: len(out) - over]
        if self._unflushed >= _FLUSH_BYTES:
            why = self._flush()
            if why:
                return self._stop(f"stopped after {_mib(self.out_bytes)}: {why}")
        return out

    def _flush(self) -> str | None:
        nbytes, seconds = self._unflushed, self._seconds
        self._unflushed, self._seconds = 0, 0.0
        return self._budget.spend_decompressed(nbytes, seconds)

    def _read_inner(self) -> bytes:
        data = self._inner.read(CHUNK)
        self.in_bytes += len(data)
        return data

    def close(self) -> None:
        if not self.closed and (self._unflushed or self._seconds):
            self._flush()
        try:
            self._inner.close()
        finally:
            super().close()


class GuardedReader(_Reader):
    """Wrap a stream whose reads may raise on bad data (a zip member's CRC check, a
    decompression error) so that the stream ends instead, with the reason in `problem`.
    `budgeted`: what it reads is decompressed data, counted against the job's budget."""

    def __init__(self, inner: IO[bytes], what: str, *, budgeted: bool = False) -> None:
        from triage import budget

        self._inner = inner
        self._what = what
        self._budget = budget.current() if budgeted else None
        self._unflushed = 0
        self._seconds = 0.0
        self._done = 0

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        if self.problem is not None:
            return 0
        started = time.perf_counter()
        try:
            data = self._inner.read(len(buf))
        except Exception as exc:
            self.problem = f"{self._what}: {exc}"
            return 0
        if self._budget is not None:
            self._seconds += time.perf_counter() - started
            self._unflushed += len(data)
            self._done += len(data)
            if self._unflushed >= _FLUSH_BYTES or not data:
                why = self._budget.spend_decompressed(self._unflushed, self._seconds)
                self._unflushed, self._seconds = 0, 0.0
                if why:
                    self.problem = f"stopped after {_mib(self._done)}: {why}"
        memoryview(buf)[: len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._inner.close()
        except Exception:
            pass
        finally:
            super().close()


class _Failed(_Reader):
    def __init__(self, problem: str) -> None:
        self.problem = problem

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        return 0


def safe_opener(opener: Callable[[], IO[bytes]]) -> Callable[[], IO[bytes]]:
    """`opener`, but a file that vanished or became unreadable after discovery gives an
    empty stream whose `stream_problem` says why, instead of an exception in a parser."""

    def open_safely() -> IO[bytes]:
        try:
            return opener()
        except Exception as exc:
            return buffered(_Failed(f"could not be opened ({exc})"))

    return open_safely


def empty_stream() -> IO[bytes]:
    return io.BytesIO(b"")


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.0f} MiB"
