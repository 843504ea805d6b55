"""Read tar, tar.gz/.bz2/.xz, zip and single-file gzip/bzip2/xz in place.

Nothing is ever extracted to a path taken from an archive: member names are only shown to
the user. Members are read through windows into the archive (plain tar), by re-reading one
local header (zip), or from a spool (compressed tar, which can only be read front to back).

Limits guard against archive bombs and absurd archives; tripping one skips what is over the
limit and leaves a warning, the rest of the archive is still read.
"""

from __future__ import annotations

import struct
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import IO

import regex

from triage.ingest.streams import (
    CHUNK,
    DecompressReader,
    GuardedReader,
    Spool,
    WindowReader,
    buffered,
)

Opener = Callable[[], IO[bytes]]

MIB = 1024 * 1024
GIB = 1024 * MIB


@dataclass(frozen=True)
class Limits:
    """How much of an archive is read. The defaults fit real job bundles with room to spare."""

    max_members: int = 100_000  # entries per archive (all kinds); the rest are not listed
    max_total_bytes: int = 8 * GIB  # uncompressed bytes per archive, or per compressed file
    max_ratio: float = 200.0  # uncompressed / compressed; real logs compress 5-30x
    ratio_floor_bytes: int = 16 * MIB  # the ratio only counts past this much output
    bomb_skip_bytes: int = 1 * GIB  # output thrown away to get past a bomb in a stream
    max_depth: int = 3  # archives inside archives


@dataclass(frozen=True)
class Member:
    """One regular file inside an archive."""

    name: str  # as stored, made printable; shown, never used as a path
    opener: Opener
    size: int
    random_access: bool  # `opener()` streams can seek cheaply (needed for a nested zip)
    warnings: tuple[str, ...] = ()
    readable: bool = True  # False: listed for the user, content not read (warnings say why)


@dataclass
class ArchiveReport:
    """Archive-level problems found while listing; shown on an entry for the archive."""

    warnings: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ format sniffing

_GZIP = b"\x1f\x8b"
_BZ2 = b"BZh"
_XZ = b"\xfd7zXZ\x00"
_ZIP = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")


def container_format(head: bytes) -> str | None:
    """`zip`, `tar`, or a compression codec (`gzip`, `bz2`, `xz`) from magic bytes."""
    if head.startswith(_ZIP):
        return "zip"
    if head.startswith(_GZIP):
        return "gzip"
    if head.startswith(_BZ2) and len(head) > 3 and head[3:4] in b"123456789":
        return "bz2"
    if head.startswith(_XZ):
        return "xz"
    if looks_like_tar(head):
        return "tar"
    return None


def looks_like_tar(head: bytes) -> bool:
    """A valid first tar header: `ustar` magic (POSIX/GNU) or a good checksum (old v7)."""
    if len(head) < 512:
        return False
    block = head[:512]
    if block[257:262] == b"ustar":
        return True
    raw = block[148:156].split(b"\x00", 1)[0].strip()
    if not raw or not all(48 <= c <= 55 for c in raw):
        return False
    stored = int(raw, 8)
    computed = sum(block[:148]) + 8 * 32 + sum(block[156:])
    return stored == computed and block[0] != 0


_UNPRINTABLE = regex.compile(r"[\p{Cc}\p{Cf}\p{Cs}]")


def printable_name(name: str) -> str:
    """Names can hold control characters (terminal escapes) or bytes that are not UTF-8
    (kept by Python as lone surrogates, which no report could encode): show them escaped."""

    def escape(m: regex.Match[str]) -> str:
        code = ord(m.group())
        if 0xDC80 <= code <= 0xDCFF:  # a raw byte kept by surrogateescape
            return f"\\x{code - 0xDC00:02x}"
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _UNPRINTABLE.sub(escape, name)


def _ignored(name: str) -> bool:
    # macOS zip/tar artefacts carry no evidence, only noise ("binary file" x N).
    parts = name.replace("\\", "/").split("/")
    return "__MACOSX" in parts or parts[-1] in (".DS_Store", "") or parts[-1].startswith("._")


# ------------------------------------------------------------------ zip

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_LOCAL_MAGIC = b"PK\x03\x04"


def iter_zip(opener: Opener, limits: Limits, report: ArchiveReport) -> Iterator[Member]:
    """Members of a zip, in stored order. Each member's `open()` re-reads only its own
    local header, so no file handle stays open between reads."""
    try:
        with opener() as f, zipfile.ZipFile(f) as zf:
            infos = zf.infolist()
    except Exception as exc:  # BadZipFile, truncated central directory, OSError...
        report.warnings.append(f"not a readable zip archive ({_why(exc)}); nothing read from it")
        return
    if _is_torch_checkpoint(infos):
        report.warnings.append("a PyTorch checkpoint (torch.save zip), not read")
        return
    overlap = _overlapping_entry(infos)
    if overlap is not None:
        # Entries sharing compressed bytes are the trick of non-recursive zip bombs.
        report.warnings.append(
            f"entries overlap inside the file at {printable_name(overlap)} (a zip bomb "
            "construction); nothing read from it"
        )
        return
    if len(infos) > limits.max_members:
        report.warnings.append(
            f"{len(infos)} entries, more than the {limits.max_members} limit: "
            f"only the first {limits.max_members} were looked at"
        )
        infos = infos[: limits.max_members]
    total = 0
    for info in infos:
        if info.is_dir() or _ignored(info.filename):
            continue
        name = printable_name(info.filename)
        if _zip_is_symlink(info):
            why = f"symbolic link member (to {_zip_link_target(opener, info)}), not followed"
            yield Member(name, _no_content, 0, True, (why,), False)
            continue
        if info.flag_bits & 0x1:
            yield Member(
                name, _no_content, info.file_size, True, ("encrypted member, not read",), False
            )
            continue
        if _is_bomb(info.file_size, info.compress_size, limits):
            ratio = info.file_size // max(info.compress_size, 1)
            report.warnings.append(
                f"{name}: skipped, it would expand to {_size(info.file_size)} "
                f"({ratio}:1, possible archive bomb)"
            )
            continue
        if total + info.file_size > limits.max_total_bytes:
            report.warnings.append(
                f"stopped at {name}: the archive holds more than "
                f"{_size(limits.max_total_bytes)} uncompressed; the rest was not read"
            )
            return
        total += info.file_size
        yield Member(name, _zip_member_opener(opener, info), info.file_size, False)


def _is_torch_checkpoint(infos: list[zipfile.ZipInfo]) -> bool:
    # torch.save writes a zip of `<name>/data.pkl`, `<name>/version` and raw tensor blobs:
    # hundreds of "binary file" lines would only bury the logs.
    names = {info.filename.rsplit("/", 1)[-1] for info in infos}
    return "data.pkl" in names and ("version" in names or "byteorder" in names)


def _overlapping_entry(infos: list[zipfile.ZipInfo]) -> str | None:
    """The name of an entry whose data runs into the next entry's header, if any. The local
    extra field is not counted, so the computed end is never past the real one."""
    ordered = sorted(infos, key=lambda i: i.header_offset)
    for this, following in pairwise(ordered):
        encoding = "utf-8" if this.flag_bits & 0x800 else "cp437"
        try:
            name_len = len(this.orig_filename.encode(encoding))
        except UnicodeError:
            name_len = 0  # an under-estimate keeps the test on the safe side
        end = this.header_offset + _LOCAL_HEADER.size + name_len + this.compress_size
        if end > following.header_offset:
            return following.filename
    return None


def _zip_is_symlink(info: zipfile.ZipInfo) -> bool:
    return (info.external_attr >> 16) & 0o170000 == 0o120000


def _zip_link_target(opener: Opener, info: zipfile.ZipInfo) -> str:
    """A zip symlink's target path (its content), shown to the user, never followed."""
    if info.file_size > 4096:
        return "a target path too long to show"
    try:
        with _zip_member_opener(opener, info)() as f:
            raw = f.read(4096)
    except Exception:  # noqa: BLE001 - only a label
        return "an unreadable target"
    return printable_name(raw.decode("utf-8", "replace")) or "an empty target"


def _zip_member_opener(opener: Opener, info: zipfile.ZipInfo) -> Opener:
    def open_member() -> IO[bytes]:
        f = opener()
        try:
            f.seek(info.header_offset)
            header = f.read(_LOCAL_HEADER.size)
            if len(header) != _LOCAL_HEADER.size or not header.startswith(_LOCAL_MAGIC):
                raise zipfile.BadZipFile("bad local file header")
            fields = _LOCAL_HEADER.unpack(header)
            f.seek(fields[10] + fields[11], 1)  # file name and extra field lengths
            inner = zipfile.ZipExtFile(f, "r", info, None, True)  # closes f
        except Exception as exc:
            f.close()
            reader = GuardedReader(_no_content(), "zip member")
            reader.problem = f"zip member could not be read ({_why(exc)})"
            return buffered(reader)
        return buffered(GuardedReader(inner, "zip member is corrupt"))

    return open_member


# ------------------------------------------------------------------ tar


def iter_tar(opener: Opener, limits: Limits, report: ArchiveReport) -> Iterator[Member]:
    """Members of an uncompressed tar read through windows into the archive itself."""
    try:
        f = opener()
    except Exception as exc:
        report.warnings.append(f"tar archive could not be opened ({_why(exc)})")
        return
    with f:
        try:
            tf = tarfile.open(fileobj=f, mode="r:")  # noqa: SIM115 (closed with f)
        except Exception as exc:
            report.warnings.append(f"not a readable tar archive ({_why(exc)}); nothing read")
            return
        count = 0
        total = 0
        while True:
            try:
                info = tf.next()
            except Exception as exc:
                report.warnings.append(
                    f"the archive is truncated or corrupt after {count} entries ({_why(exc)}); "
                    "the rest was not read"
                )
                return
            if info is None:
                return
            count += 1
            if count > limits.max_members:
                report.warnings.append(_too_many(limits))
                return
            if info.isdir() or _ignored(info.name):
                continue
            name = printable_name(info.name)
            special = _special_member(info)
            if special is not None:
                yield Member(name, _no_content, 0, True, (special,), False)
                continue
            if info.issparse():
                yield Member(
                    name, _no_content, info.size, True, ("sparse tar member, not read",), False
                )
                continue
            if total + info.size > limits.max_total_bytes:
                report.warnings.append(_too_big(name, limits))
                return
            total += info.size
            yield Member(name, _window_opener(opener, info.offset_data, info.size), info.size, True)


def _special_member(info: tarfile.TarInfo) -> str | None:
    """Why a tar member that is not a regular file is listed but not read; None for a file.
    Links are never followed: a link's target is only shown (it may point anywhere)."""
    if info.isreg():
        return None
    target = printable_name(info.linkname)
    if info.issym():
        return f"symbolic link member (to {target}), not followed"
    if info.islnk():
        return f"hard link member (to {target}), not followed"
    if info.ischr() or info.isblk():
        return "device member, not read"
    if info.isfifo():
        return "named pipe (FIFO) member, not read"
    return f"tar member of type {info.type!r}, not a regular file; not read"


def _window_opener(opener: Opener, offset: int, size: int) -> Opener:
    return lambda: buffered(WindowReader(opener(), offset, size))


def iter_tar_stream(
    opener: Opener, codec: str, limits: Limits, report: ArchiveReport, spool: Callable[[], Spool]
) -> Iterator[Member]:
    """Members of a compressed tar, decompressed once, front to back, into the spool."""
    try:
        raw = opener()
    except Exception as exc:
        report.warnings.append(f"archive could not be opened ({_why(exc)})")
        return
    dec = DecompressReader(raw, codec, max_out=limits.max_total_bytes + limits.bomb_skip_bytes)
    with buffered(dec, 1 << 20) as stream:
        try:
            tf = tarfile.open(fileobj=stream, mode="r|")  # noqa: SIM115 (closed with stream)
        except Exception as exc:
            report.warnings.append(f"not a readable tar archive ({_why(exc)}); nothing read")
            return
        count = 0
        kept = 0
        while True:
            try:
                info = tf.next()
            except Exception as exc:
                report.warnings.append(_broken(count, dec.problem or _why(exc)))
                return
            if info is None:
                if dec.problem:
                    report.warnings.append(_broken(count, dec.problem))
                return
            count += 1
            if count > limits.max_members:
                report.warnings.append(_too_many(limits))
                return
            if info.isdir() or _ignored(info.name):
                continue
            name = printable_name(info.name)
            special = _special_member(info)
            if special is not None:
                yield Member(name, _no_content, 0, True, (special,), False)
                continue
            if info.issparse():  # holes expand to any size: a cheap bomb
                yield Member(
                    name, _no_content, info.size, True, ("sparse tar member, not read",), False
                )
                continue
            if kept + info.size > limits.max_total_bytes:
                report.warnings.append(_too_big(name, limits))
                return
            copied = _copy_member(tf, info, dec, spool, limits)
            if copied.bomb:
                report.warnings.append(f"{name}: skipped, {copied.bomb}")
                if copied.stop:
                    report.warnings.append(
                        f"stopped inside {name}: the rest of the archive was not read"
                    )
                    return
                continue
            kept += copied.size
            warnings: tuple[str, ...] = ()
            if copied.error:
                warnings = (f"the archive ends inside this member ({copied.error})",)
            yield Member(
                name,
                _spool_opener(copied.spool, copied.offset, copied.size),
                copied.size,
                True,
                warnings,
            )
            if copied.error:
                report.warnings.append(_broken(count, copied.error))
                return


@dataclass
class _Copied:
    spool: Spool | None = None
    offset: int = 0
    size: int = 0
    bomb: str | None = None  # why the member was skipped
    stop: bool = False  # the bomb could not be read past: stop the archive
    error: str | None = None  # the stream broke inside the member


def _copy_member(
    tf: tarfile.TarFile,
    info: tarfile.TarInfo,
    dec: DecompressReader,
    spool_factory: Callable[[], Spool],
    limits: Limits,
) -> _Copied:
    spool = spool_factory()
    out = _Copied(spool=spool, offset=spool.end)
    compressed_start = dec.in_bytes
    skipped = 0
    try:
        src = tf.extractfile(info)
        if src is None:
            return out
        while True:
            chunk = src.read(CHUNK * 4)
            if not chunk:
                break
            if out.bomb is None:
                spool.write(chunk)
                out.size += len(chunk)
                compressed = max(dec.in_bytes - compressed_start, 1)
                if _is_bomb(out.size, compressed, limits):
                    out.bomb = (
                        f"it expands more than {limits.max_ratio:g}:1 "
                        f"(past {_size(out.size)} from {_size(compressed)}; possible archive bomb)"
                    )
            else:
                # Read past the rest of the bomb (to reach the next members), within a budget.
                skipped += len(chunk)
                if skipped > limits.bomb_skip_bytes:
                    out.stop = True
                    return out
    except Exception as exc:
        if out.bomb is not None:
            out.stop = True
            return out
        out.error = dec.problem or _why(exc)
        return out
    if out.bomb is None and out.size < info.size:
        out.error = dec.problem or "the compressed data ends early"
    return out


def _spool_opener(spool: Spool | None, offset: int, size: int) -> Opener:
    assert spool is not None
    return lambda: spool.reader(offset, size)


# ------------------------------------------------------------------ single compressed file


def decompressed_opener(opener: Opener, codec: str, limits: Limits) -> Opener:
    """A gzip/bzip2/xz file read as the file inside, ratio and size capped."""

    def open_decompressed() -> IO[bytes]:
        return buffered(
            DecompressReader(
                opener(),
                codec,
                max_out=limits.max_total_bytes,
                max_ratio=limits.max_ratio,
                ratio_floor=limits.ratio_floor_bytes,
            )
        )

    return open_decompressed


def gzip_size_hint(opener: Opener) -> int | None:
    """The uncompressed size a gzip file states in its trailer (mod 2**32; may lie)."""
    try:
        with opener() as f:
            if not f.seekable():
                return None
            f.seek(-4, 2)
            tail = f.read(4)
    except Exception:
        return None
    return int.from_bytes(tail, "little") if len(tail) == 4 else None


def is_bomb(uncompressed: int, compressed: int, limits: Limits) -> bool:
    return _is_bomb(uncompressed, compressed, limits)


def _is_bomb(uncompressed: int, compressed: int, limits: Limits) -> bool:
    return uncompressed > limits.ratio_floor_bytes and uncompressed > limits.max_ratio * max(
        compressed, 1
    )


# ------------------------------------------------------------------ helpers


def _no_content() -> IO[bytes]:
    import io

    return io.BytesIO(b"")


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _size(n: int) -> str:
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    if n >= MIB:
        return f"{n / MIB:.0f} MiB"
    return f"{n} bytes"


def _too_many(limits: Limits) -> str:
    return f"more than {limits.max_members} entries: the rest was not read"


def _too_big(name: str, limits: Limits) -> str:
    return (
        f"stopped at {name}: the archive holds more than {_size(limits.max_total_bytes)} "
        "uncompressed; the rest was not read"
    )


def _broken(count: int, why: str) -> str:
    return (
        f"the archive is truncated or corrupt after {count} entries ({why}); the rest was not read"
    )
