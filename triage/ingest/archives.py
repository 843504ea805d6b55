"""Read tar, tar.gz/.bz2/.xz/.zst, zip and single-file gzip/bzip2/xz/zstd in place.

Nothing is ever extracted to a path taken from an archive: member names are only shown to
the user. Members are read through windows into the archive (plain tar), by re-reading one
local header (zip), or from a spool (compressed tar, which can only be read front to back).

Limits guard against absurd archives; a bomb is stopped by what it costs the job (bytes
decompressed, seconds, temp space: `triage.budget`), never guessed from its compression
ratio. Tripping a limit skips what is over it and leaves a warning; the rest is still read.
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

from triage import regex_cache
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
    """How much of an archive is listed. The defaults fit real job bundles with room to spare.

    What decompressing costs (bytes, seconds) and the temp space members take are limited per
    job, across every archive and compressed file of it: see `triage.budget`."""

    max_members: int = 100_000  # entries per archive (all kinds); the rest are not listed
    max_total_bytes: int = 8 * GIB  # uncompressed bytes per archive, or per compressed file
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
    release: Callable[[], None] | None = None  # frees the temp space the content takes


# What a compressed tar's member is worth copying out: given the member's first bytes,
# None to copy it, or the warnings of a member that is not read (binary, empty...).
Judge = Callable[[bytes], "tuple[str, ...] | None"]


@dataclass
class ArchiveReport:
    """Archive-level problems found while listing; shown on an entry for the archive."""

    warnings: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ format sniffing

_ZSTD = b"\x28\xb5\x2f\xfd"
_GZIP = b"\x1f\x8b"
_BZ2 = b"BZh"
_XZ = b"\xfd7zXZ\x00"
_ZIP = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")


def container_format(head: bytes) -> str | None:
    """`zip`, `tar`, or a compression codec (`gzip`, `bz2`, `xz`, `zstd`) from magic bytes."""
    if head.startswith(_ZIP):
        return "zip"
    if head.startswith(_ZSTD):
        return "zstd"
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


_UNPRINTABLE = regex_cache.compile(r"[\p{Cc}\p{Cf}\p{Cs}]")


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
        # A deflated member costs what it expands to: counted against the job's budget.
        budgeted = info.compress_type != zipfile.ZIP_STORED
        return buffered(GuardedReader(inner, "zip member is corrupt", budgeted=budgeted))

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
            listed = _listed_only(info, name)
            if listed is not None:
                yield listed
                continue
            if total + info.size > limits.max_total_bytes:
                report.warnings.append(_too_big(name, limits))
                return
            total += info.size
            yield Member(name, _window_opener(opener, info.offset_data, info.size), info.size, True)


def _listed_only(info: tarfile.TarInfo, name: str) -> Member | None:
    """A tar member that is listed with why it is not read (a link, a device, a sparse file);
    None for a regular file, to be read."""
    special = _special_member(info)
    if special is not None:
        return Member(name, _no_content, 0, True, (special,), False)
    if info.issparse():  # holes expand to any size: a cheap bomb
        return Member(name, _no_content, info.size, True, ("sparse tar member, not read",), False)
    return None


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
    opener: Opener,
    codec: str,
    limits: Limits,
    report: ArchiveReport,
    spool: Callable[[], Spool],
    judge: Judge,
) -> Iterator[Member]:
    """Members of a compressed tar, decompressed once, front to back. Each member's first
    bytes are judged before anything is copied: only members worth reading go to the spool
    (within the job's temp-space budget); the rest are listed with the reason."""
    try:
        raw = opener()
    except Exception as exc:
        report.warnings.append(f"archive could not be opened ({_why(exc)})")
        return
    dec = DecompressReader(raw, codec, max_out=limits.max_total_bytes)
    with buffered(dec, 1 << 20) as stream:
        try:
            tf = tarfile.open(fileobj=stream, mode="r|")  # noqa: SIM115 (closed with stream)
        except Exception as exc:
            report.warnings.append(
                f"not a readable tar archive ({dec.problem or _why(exc)}); nothing read"
            )
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
            listed = _listed_only(info, name)
            if listed is not None:
                yield listed
                continue
            if kept + info.size > limits.max_total_bytes:
                report.warnings.append(_too_big(name, limits))
                return
            copied = _copy_member(tf, info, dec, spool, judge)
            if copied.skipped is not None:
                yield Member(name, _no_content, info.size, True, copied.skipped, False)
            else:
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
                    release=copied.release,
                )
            if copied.error:
                report.warnings.append(_broken(count, copied.error))
                return


@dataclass
class _Copied:
    spool: Spool | None = None
    offset: int = 0
    size: int = 0
    skipped: tuple[str, ...] | None = None  # not copied: why (the member is still listed)
    error: str | None = None  # the stream broke inside the member
    release: Callable[[], None] | None = None


def _copy_member(
    tf: tarfile.TarFile,
    info: tarfile.TarInfo,
    dec: DecompressReader,
    spool_factory: Callable[[], Spool],
    judge: Judge,
) -> _Copied:
    out = _Copied()
    src = tf.extractfile(info)
    if src is None:
        return out
    head: list[bytes] = []
    try:
        left = _JUDGE_BYTES
        while left > 0 and (chunk := src.read(left)):
            head.append(chunk)
            left -= len(chunk)
    except Exception as exc:  # the stream broke inside the first bytes: keep what came
        out.error = dec.problem or _why(exc)
    first = b"".join(head)
    verdict = judge(first) if first else None
    spool = spool_factory()
    if verdict is None and not spool.reserve(info.size):
        verdict = (
            f"not read: {_size(info.size)} would not fit in the temp space this job may use "
            f"({_size(spool.limit)}, see SECURITY.md)",
        )
    if verdict is not None:
        out.skipped = verdict
        try:
            while out.error is None and src.read(CHUNK * 4):
                pass  # decompressed to reach the next member, not kept
        except Exception as exc:
            out.error = dec.problem or _why(exc)
        if out.error is None and dec.problem:
            out.error = dec.problem
        return out
    out.spool, out.offset = spool, spool.end
    try:
        chunk = first
        while chunk:
            spool.write(chunk)
            out.size += len(chunk)
            chunk = src.read(CHUNK * 4) if out.error is None else b""
    except Exception as exc:
        out.error = dec.problem or _why(exc)
    out.release = spool.releaser(out.offset, out.size, info.size)
    if out.error is None and out.size < info.size:
        out.error = dec.problem or "the compressed data ends early"
    return out


_JUDGE_BYTES = 64 * 1024  # what the sniffer looks at (ingest.sniff.HEAD_BYTES)


def _spool_opener(spool: Spool | None, offset: int, size: int) -> Opener:
    assert spool is not None
    return lambda: spool.reader(offset, size)


# ------------------------------------------------------------------ single compressed file


def decompressed_opener(opener: Opener, codec: str, limits: Limits) -> Opener:
    """A gzip/bzip2/xz file read as the file inside, ratio and size capped."""

    def open_decompressed() -> IO[bytes]:
        return buffered(DecompressReader(opener(), codec, max_out=limits.max_total_bytes))

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
