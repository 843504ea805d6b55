"""Binary streams behind `Source.open()`: windows into files, spooled archive members, and
capped decompression.

None of them raises on bad data while reading: a corrupt or truncated compressed stream, or
one that trips a limit, simply ends, and the reason is kept in `problem` (see
`stream_problem`). Memory stays bounded: everything is read in chunks.
"""

from __future__ import annotations

import bz2
import io
import lzma
import os
import tempfile
import threading
import zlib
from collections.abc import Callable
from typing import IO, Protocol

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
    a whole `discover()` call, so a folder of 1,000 .tgz files holds one descriptor, not 1,000.
    """

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="triage-spool-")  # noqa: SIM115 (lives with the spool)
        self._fd = self._file.fileno()
        self._end = 0
        self._lock = threading.Lock()

    @property
    def end(self) -> int:
        return self._end

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


_DECOMPRESSORS: dict[str, Callable[[], object]] = {
    "gzip": _ZlibStream,
    "bz2": bz2.BZ2Decompressor,
    "xz": lzma.LZMADecompressor,
}

_DATA_ERRORS = (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError)


class DecompressReader(_Reader):
    """Decompress gzip / bzip2 / xz (multi-stream) from `inner`, in bounded chunks.

    `in_bytes` / `out_bytes` count compressed bytes read and bytes produced, so callers can
    judge compression ratios. The stream ends (never raises) when the data is corrupt or
    truncated, after `max_out` bytes, or when more than `ratio_floor` bytes came out at more
    than `max_ratio` bytes per compressed byte (an archive bomb).
    """

    def __init__(
        self,
        inner: IO[bytes],
        codec: str,
        *,
        max_out: int,
        max_ratio: float | None = None,
        ratio_floor: int = 0,
    ) -> None:
        self._inner = inner
        self._codec = codec
        self._d = _DECOMPRESSORS[codec]()
        self._max_out = max_out
        self._max_ratio = max_ratio
        self._ratio_floor = ratio_floor
        self._pending = b""  # input to feed before reading more
        self._out = b""
        self._done = False
        self._streams = 1
        self.in_bytes = 0
        self.out_bytes = 0

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
        return b""

    def _next_chunk(self) -> bytes:
        d = self._d
        try:
            if d.eof:  # type: ignore[attr-defined]
                # Concatenated streams (`cat a.gz b.gz`, pbzip2) continue after the first.
                rest = d.unused_data or self._read_inner()  # type: ignore[attr-defined]
                if not rest.strip(b"\x00"):
                    return self._stop(None)
                self._d = d = _DECOMPRESSORS[self._codec]()
                self._streams += 1
                self._pending = rest
            if d.needs_input:  # type: ignore[attr-defined]
                data = self._pending or self._read_inner()
                self._pending = b""
                if not data:
                    return self._stop("the compressed data ends early (truncated file)")
            else:
                data = b""
            out = d.decompress(data, CHUNK)  # type: ignore[attr-defined]
        except _DATA_ERRORS as exc:
            if self._streams > 1:
                return self._stop(None)  # trailing junk after a complete stream
            return self._stop(f"corrupt {self._codec} data ({exc})")
        if not out:
            return b""
        self.out_bytes += len(out)
        if self.out_bytes > self._max_out:
            over = self.out_bytes - self._max_out
            self._stop(f"stopped after {_mib(self._max_out)}: over the size limit")
            return out[: len(out) - over]
        if (
            self._max_ratio is not None
            and self.out_bytes > self._ratio_floor
            and self.out_bytes > self._max_ratio * max(self.in_bytes, 1)
        ):
            ratio = self.out_bytes // max(self.in_bytes, 1)
            return self._stop(
                f"stopped after {_mib(self.out_bytes)}: it expands {ratio}:1, more than the "
                f"{self._max_ratio:g}:1 limit (possible archive bomb)"
            )
        return out

    def _read_inner(self) -> bytes:
        data = self._inner.read(CHUNK)
        self.in_bytes += len(data)
        return data

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


class GuardedReader(_Reader):
    """Wrap a stream whose reads may raise on bad data (a zip member's CRC check, a
    decompression error) so that the stream ends instead, with the reason in `problem`."""

    def __init__(self, inner: IO[bytes], what: str) -> None:
        self._inner = inner
        self._what = what

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        if self.problem is not None:
            return 0
        try:
            data = self._inner.read(len(buf))
        except Exception as exc:
            self.problem = f"{self._what}: {exc}"
            return 0
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
