"""`discover`: turn the paths a user gave into `Source`s, one per file or archive member.

Order is deterministic: the paths in the order given, folder entries in natural name order
(`rank_2` before `rank_10`), archive members in stored order. `.git`, `.hg`, `.svn` and
`__pycache__` folders are skipped. Anything that cannot be read
(missing, permission denied, a symlink loop, a FIFO, an empty folder, a broken archive)
becomes a Source whose `warnings` say so, so the report lists it; nothing here raises.

Only the first HEAD_BYTES of a file are read to sniff its kind. Compressed tars are the one
exception: they can only be read front to back, so walking one decompresses it once; the
members worth reading (judged by their first bytes) are copied into a spool (an anonymous
temp file, one per job, within the job's temp-space budget) from which they are then read,
and whose space each gives back once parsed (`Source.release`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from functools import partial

from triage import budget, regex_cache
from triage.ingest.archives import (
    ArchiveReport,
    Limits,
    Member,
    Opener,
    container_format,
    decompressed_opener,
    gzip_size_hint,
    iter_tar,
    iter_tar_stream,
    iter_zip,
    looks_like_tar,
    printable_name,
)
from triage.ingest.attribution import attribute, confirmed
from triage.ingest.sniff import HEAD_BYTES, Sniffed, nccl_only, sniff
from triage.ingest.streams import (
    CHUNK,
    Spool,
    empty_stream,
    safe_opener,
    stream_problem,
    zstd_available,
)
from triage.model import InputNote, Source, SourceKind

_DIGITS = regex_cache.compile(r"(\d+)")
TAIL_BYTES = 16 * 1024
# what a process printed, whose lines say its rank (`confirmed`)
_LOG_KINDS = frozenset({SourceKind.RANK_LOG, SourceKind.TEXT, SourceKind.NCCL})
_MAX_DIR_DEPTH = 64  # far deeper than any job bundle; keeps recursion bounded
_CODECS = ("gzip", "bz2", "xz", "zstd")
_CONTAINER_HEAD = 1024  # enough for every magic `container_format` checks (tar's at 257)
# Tool folders inside a bundle that never hold job output (version control, bytecode).
_SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__"})
# A file named as a job's output stream holds what the job printed even when its first lines
# say little (module-load notices above a time limit at its end): the scheduler's
# `--output`/`--error` files (`slurm-123.out`, `run.err`), PBS's `<job>.o123`/`.e123`,
# Cobalt's `.output`/`.error`/`.cobaltlog`, a `.log`, `stdout`/`stderr`. Read beside the logs,
# never set aside as a note.
_OUTPUT_STREAM_NAME = regex_cache.compile(
    r"(?i)(?:\.(?:out|err|log|output|error|cobaltlog|stdout|stderr)|\.[oe]\d+|(?:^|[/\\])std(?:out|err)[^/\\]*)$"
)


def discover(
    paths: Sequence[str], *, limits: Limits | None = None, follow_links: bool = False
) -> Iterator[Source]:
    """Yield one Source per input file or archive member under `paths`, kind sniffed.

    Also yields warning-only Sources (kind TEXT, empty content) for inputs that could not be
    read, empty folders, and archives with problems (bombs, truncation, limits).

    A symbolic link met while walking a folder is followed only when its real path lies under
    one of `paths` (a bundle's own `latest -> attempt_2`); a link out of them (to another job's
    logs, a home folder) is listed with its target and not read, unless `follow_links`. A
    path given in `paths` is always read: naming it is the user's choice.
    """
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]  # one path given bare: not a sequence of one-letter paths
    names = [os.fsdecode(path) for path in paths]
    walker = _Walker(limits or Limits(), None if follow_links else _roots(names))
    # Text with no mark of a process's output (a README, notes, one JSON document) is the
    # evidence when it is all there is (a pasted error saved to a file); beside a job's logs
    # it is what someone wrote about the job (the answer they expect, a config), not what
    # the job printed, so it is listed and not read.
    notes: list[Source] = []
    logs_seen = False
    for path in names:
        for source in walker.top(path):
            # a text whose path names its rank (torchrun's `attempt_0/3/stdout.log`: a local
            # rank) is what that rank printed, however few lines it holds: read, not set aside
            if (
                source.kind is SourceKind.TEXT
                and source.open is not empty_stream
                and source.rank is None
                and source.local_rank is None
                and not _OUTPUT_STREAM_NAME.search(source.path)
            ):
                notes.append(source)
                continue
            logs_seen = logs_seen or source.open is not empty_stream
            yield source
    for source in notes:
        yield _set_aside(source) if logs_seen else source


def _set_aside(source: Source) -> Source:
    """A note beside the logs: listed with why, its content not read."""
    if source.release is not None:
        source.release()
    return Source(
        path=source.path,
        kind=SourceKind.TEXT,
        size=source.size,
        open=empty_stream,
        rank=source.rank,
        local_rank=source.local_rank,
        host=source.host,
        attempt=source.attempt,
        warnings=(*source.warnings, InputNote.BESIDE_LOGS.value),
    )


def _roots(paths: Sequence[str]) -> tuple[str, ...]:
    """The real paths of what the user named: the only places a link may lead."""
    return tuple(dict.fromkeys(os.path.realpath(p) for p in paths))


def _under(real: str, roots: Sequence[str]) -> bool:
    return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def reopen_plain(path: str, size: int) -> Opener | None:
    """The opener `discover` gives a plain file on disk (not an archive, not compressed) of
    `size` bytes, found again without sniffing it: a worker process handed a Source by path
    needs no second look at its content. None for anything else (the caller discovers it)."""
    try:
        if os.path.getsize(path) != size:
            return None  # changed since discovery: the caller reports it as discovered
        with open(path, "rb") as f:
            head = f.read(_CONTAINER_HEAD)
    except OSError:
        return None
    if not head or container_format(head) is not None:
        return None
    return safe_opener(partial(open, path, "rb"))


def _natural_key(name: str) -> tuple[list[object], str]:
    return [int(t) if t.isdigit() else t.lower() for t in _DIGITS.split(name)], name


def _parts(path: str) -> list[str]:
    return [p for p in path.replace(os.sep, "/").split("/") if p]


def _os_problem(exc: OSError) -> str:
    code = exc.errno
    if code == errno.ELOOP:
        return "symbolic link loop, not followed"
    if code == errno.ENOENT:
        return "no such file or directory (or a broken symbolic link)"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied, not read"
    return f"could not be read ({exc.strerror or type(exc).__name__})"


def file_type(mode: int) -> str:
    """What a thing in a folder that is not a regular file or a folder is, in words."""
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


class _Walker:
    def __init__(self, limits: Limits, roots: tuple[str, ...] | None) -> None:
        self.limits = limits
        self.roots = roots  # None: follow every link (--follow-links)
        self._seen_files: set[tuple[int, int]] = set()
        self._seen_dirs: set[tuple[int, int]] = set()
        self._spool: Spool | None = None

    def spool(self) -> Spool:
        if self._spool is None:
            self._spool = Spool(budget.current().limits.spool_bytes)
        return self._spool

    # -------------------------------------------------------------- disk

    def top(self, path: str) -> Iterator[Source]:
        try:
            st = os.stat(path)
        except OSError as exc:
            yield _problem(path, _parts(path), (_os_problem(exc),))
            return
        if stat.S_ISDIR(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if key in self._seen_dirs:
                return
            self._seen_dirs.add(key)
            found = yield from self._dir(path, frozenset({key}))
            if not found:
                yield _problem(path, _parts(path), (InputNote.EMPTY_DIRECTORY,))
        elif stat.S_ISREG(st.st_mode):
            yield from self._file(path, st)
        else:
            yield _problem(path, _parts(path), (f"{file_type(st.st_mode)}, not read",))

    def _dir(self, path: str, ancestors: frozenset[tuple[int, int]]) -> Iterator[Source]:
        """Walk one folder; return whether anything at all was found under it."""
        try:
            with os.scandir(path) as it:
                names = sorted((e.name for e in it), key=_natural_key)
        except OSError as exc:
            yield _problem(path, _parts(path), (f"folder {_os_problem(exc)}",))
            return True
        found = False
        empty_children: list[str] = []
        for name in names:
            child = os.path.join(path, name)
            why = self._link_out(child)
            if why is not None:
                yield _problem(child, _parts(child), (why,))
                found = True
                continue
            try:
                st = os.stat(child)
            except OSError as exc:
                yield _problem(child, _parts(child), (_os_problem(exc),))
                found = True
                continue
            if stat.S_ISDIR(st.st_mode):
                if name in _SKIPPED_DIRS:
                    found = True  # not empty, just nothing a job wrote
                    continue
                key = (st.st_dev, st.st_ino)
                if key in ancestors:
                    yield _problem(
                        child,
                        _parts(child),
                        ("symbolic link loop: this folder links back to one containing it",),
                    )
                    found = True
                    continue
                if key in self._seen_dirs:
                    found = True  # the same folder reached again through a link
                    continue
                self._seen_dirs.add(key)
                if len(ancestors) >= _MAX_DIR_DEPTH:
                    why = f"folder nested more than {_MAX_DIR_DEPTH} deep, not walked"
                    yield _problem(child, _parts(child), (why,))
                    found = True
                    continue
                if (yield from self._dir(child, ancestors | {key})):
                    found = True
                else:
                    empty_children.append(child)
            elif stat.S_ISREG(st.st_mode):
                yield from self._file(child, st)
                found = True
            else:
                yield _problem(child, _parts(child), (f"{file_type(st.st_mode)}, not read",))
                found = True
        if found:
            # An empty folder next to real files is worth a line (a rank that wrote nothing);
            # a wholly empty tree is reported once, at its top, by the caller.
            for child in empty_children:
                yield _problem(child, _parts(child), (InputNote.EMPTY_DIRECTORY,))
        return found

    def _link_out(self, path: str) -> str | None:
        """Why the symbolic link `path` is not followed (it leads out of the named paths, or
        nowhere); None when `path` is no link or leads somewhere inside them."""
        if not os.path.islink(path):
            return None
        try:
            real = os.path.realpath(path, strict=True)
        except OSError as exc:
            try:
                target = printable_name(os.readlink(path))
            except OSError:
                target = "an unreadable target"
            if exc.errno == errno.ELOOP:
                return f"symbolic link loop (to {target}), not followed"
            return f"broken symbolic link (to {target}), not read"
        if self.roots is None or _under(real, self.roots):
            return None
        return (
            f"symbolic link to {printable_name(real)}, outside the paths given: not followed "
            "(--follow-links reads it)"
        )

    def _file(self, path: str, st: os.stat_result) -> Iterator[Source]:
        key = (st.st_dev, st.st_ino)
        if key in self._seen_files:
            return  # the same file given twice or reached through a link
        self._seen_files.add(key)
        opener: Opener = partial(open, path, "rb")
        yield from self._blob(path, _parts(path), opener, st.st_size, True, 0)

    # -------------------------------------------------------------- content

    def _blob(
        self,
        display: str,
        parts: list[str],
        opener: Opener,
        size: int,
        random_access: bool,
        depth: int,
        warnings: tuple[str, ...] = (),
        head: bytes | None = None,
        release: Callable[[], None] | None = None,
    ) -> Iterator[Source]:
        if head is None:
            try:
                with opener() as f:
                    head = f.read(HEAD_BYTES)
                    problem = stream_problem(f)
            except OSError as exc:
                yield _problem(display, parts, (*warnings, _os_problem(exc)), size)
                return
            except Exception as exc:  # a library raising something odd on bad data
                yield _problem(display, parts, (*warnings, f"could not be read ({exc})"), size)
                return
            if problem and not head:
                yield _problem(display, parts, (*warnings, problem), size)
                return
            if problem:
                warnings = (*warnings, problem)

        fmt = container_format(head)
        if fmt == "zstd" and not zstd_available():
            why = "zstd-compressed; not read (install the `zstd` extra: pip install triage[zstd])"
            yield _problem(display, parts, (*warnings, why), size)
            return
        if fmt is not None and depth >= self.limits.max_depth:
            why = f"archive nested more than {self.limits.max_depth} deep, not opened"
            yield _problem(display, parts, (*warnings, why), size)
            return
        if fmt in ("zip", "tar"):
            yield from self._archive(display, parts, opener, size, random_access, depth, fmt)
            return
        if fmt in _CODECS:
            yield from self._compressed(
                display, parts, opener, size, random_access, depth, fmt, release
            )
            return

        found = sniff(head)
        if found.kind is SourceKind.NCCL and len(head) >= HEAD_BYTES:
            found = self._confirm_nccl(found, opener, size, random_access)
        facts = attribute(parts)
        if found.kind in _LOG_KINDS:
            # a log says its rank in its lines; a dump's content names none (its name does)
            facts = confirmed(facts, head)
        if not found.readable and release is not None:
            release()  # nothing will read it: its temp space goes back now
            release = None
        yield Source(
            path=printable_name(display),
            kind=found.kind,
            size=size,
            open=safe_opener(opener) if found.readable else empty_stream,
            rank=facts.rank,
            local_rank=facts.local_rank,
            host=facts.host,
            attempt=facts.attempt,
            warnings=(*warnings, *found.warnings),
            release=release,
        )

    def _confirm_nccl(
        self, found: Sniffed, opener: Opener, size: int, random_access: bool
    ) -> Sniffed:
        """Keep NCCL for a big file only if its tail is NCCL lines too: the NCCL parser skips
        other lines, the log parser reads both, so a doubt goes to the log parser."""
        if random_access and size > HEAD_BYTES:
            try:
                with opener() as f:
                    f.seek(max(HEAD_BYTES, size - TAIL_BYTES))
                    tail = f.read(TAIL_BYTES)
                if nccl_only(tail):
                    return found
            except Exception:
                pass
        return Sniffed(SourceKind.RANK_LOG, found.warnings, found.readable)

    def _archive(
        self,
        display: str,
        parts: list[str],
        opener: Opener,
        size: int,
        random_access: bool,
        depth: int,
        fmt: str,
    ) -> Iterator[Source]:
        report = ArchiveReport()
        if not random_access:
            # A zip or tar inside a stream (a zip member) needs seeking: copy it out once.
            spooled = self._spool_copy(opener, size, report)
            if spooled is None:
                yield _problem(display, parts, tuple(report.warnings), size)
                return
            opener = spooled
        members = iter_zip if fmt == "zip" else iter_tar
        for member in members(opener, self.limits, report):
            yield from self._member(display, parts, member, depth)
        if report.warnings:
            yield _problem(display, parts, tuple(report.warnings), size)

    def _compressed(
        self,
        display: str,
        parts: list[str],
        opener: Opener,
        size: int,
        random_access: bool,
        depth: int,
        codec: str,
        release: Callable[[], None] | None = None,
    ) -> Iterator[Source]:
        inner = decompressed_opener(opener, codec, self.limits)
        try:
            with inner() as f:
                head = f.read(HEAD_BYTES)
                problem = stream_problem(f)
        except Exception as exc:
            yield _problem(display, parts, (f"could not be read ({exc})",), size)
            return
        if looks_like_tar(head):
            report = ArchiveReport()
            members = iter_tar_stream(opener, codec, self.limits, report, self.spool, _judge)
            for member in members:
                yield from self._member(display, parts, member, depth)
            if report.warnings:
                yield _problem(display, parts, tuple(report.warnings), size)
            return
        if problem and not head:
            yield _problem(display, parts, (problem,), size)
            return
        # The size inside is known only when the head holds all of it. Otherwise it is at
        # least a head more (parsers read small inputs line by line: a 2 KB .xz of 17 MB must
        # not pass for small), and gzip's trailer may say more: it states the size modulo
        # 4 GiB, and of the last stream only (`cat a.gz b.gz`), so it is never trusted to be
        # smaller. Nothing is decided by it: what decompressing costs is counted as it goes.
        inner_size = len(head) if len(head) < HEAD_BYTES else max(size, HEAD_BYTES + 1)
        if codec == "gzip" and random_access and len(head) >= HEAD_BYTES:
            hint = gzip_size_hint(opener)
            if hint is not None:
                inner_size = max(hint, inner_size)
        warnings = (problem,) if problem else ()
        yield from self._blob(
            display, parts, inner, inner_size, False, depth + 1, warnings, head, release
        )

    def _member(
        self, archive_display: str, archive_parts: list[str], member: Member, depth: int
    ) -> Iterator[Source]:
        display = f"{archive_display}!{member.name}"
        parts = [*archive_parts, *member.name.replace("\\", "/").split("/")]
        if not member.readable:
            yield _problem(display, parts, member.warnings, member.size)
            return
        yield from self._blob(
            display,
            parts,
            member.opener,
            member.size,
            member.random_access,
            depth + 1,
            member.warnings,
            release=member.release,
        )

    def _spool_copy(self, opener: Opener, size: int, report: ArchiveReport) -> Opener | None:
        if size > self.limits.max_total_bytes:
            report.warnings.append("nested archive too large to open")
            return None
        spool = self.spool()
        # held until the job ends: its members are read out of it, in any order
        if not spool.reserve(size):
            report.warnings.append(
                "nested archive not opened: it would not fit in the temp space this job may use"
            )
            return None
        start = spool.end
        copied = 0
        try:
            with opener() as f:
                while chunk := f.read(CHUNK * 4):
                    copied += len(chunk)
                    if copied > self.limits.max_total_bytes:
                        report.warnings.append("nested archive too large to open")
                        return None
                    spool.write(chunk)
        except Exception as exc:
            report.warnings.append(f"nested archive could not be read ({exc})")
            return None
        return lambda: spool.reader(start, copied)


def _judge(head: bytes) -> tuple[str, ...] | None:
    """Whether a compressed tar's member is worth copying out, from its first bytes: None
    for text, dumps and nested archives; the reasons it is not read otherwise."""
    if container_format(head) is not None:
        return None
    found = sniff(head)
    return None if found.readable else found.warnings


def _problem(display: str, parts: list[str], warnings: tuple[str, ...], size: int = 0) -> Source:
    """A Source that only carries warnings: listed in the report, nothing to parse."""
    facts = attribute(parts)
    return Source(
        path=printable_name(display),
        kind=SourceKind.TEXT,
        size=size,
        open=empty_stream,
        rank=facts.rank,
        local_rank=facts.local_rank,
        host=facts.host,
        attempt=facts.attempt,
        warnings=warnings or ("could not be read",),
    )
