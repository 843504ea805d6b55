"""What start-up derives from the knowledge files, kept on disk between runs.

Every run reads ~450 KB of rule YAML and parses ~800 rule patterns for their literals
(`triage.literals.required_literals`): ~0.3 s of a CLI run's start, before any worker can
start parsing. Both are pure functions of their input, so the results are kept in JSON
files, one per kind of value (a section: the YAML documents, the literals, ...), in
`$TRIAGE_CACHE_DIR` or `$XDG_CACHE_HOME/triage` (`~/.cache/triage`), keyed by the input
itself (a file's content hash, a pattern's text): a changed file or pattern is simply not
found. A section's file is read the first time the run asks for one of its values: a run
whose knowledge comes built (`triage.knowledge.stored`) reads the patterns' literals
(~180 KB) and never the YAML documents (~1 MB). JSON, not pickle: a cache file somebody else
wrote can give wrong literals at worst, never run code; and anything JSON cannot give back
exactly is not kept.

A cache that cannot be read or written is no error: the run derives everything again.
`TRIAGE_NO_CACHE=1` turns it off.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import hashlib
import json
import marshal
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

_VERSION = 2
_MAX_ENTRIES = 20_000  # per section: team folders come and go; past this it starts afresh
_sections: dict[str, dict[str, Any]] = {}  # the sections read (or begun) so far
_changed: set[str] = set()  # the sections this process added to since its last save


def section_file(name: str) -> str:
    """The name of the file that keeps section `name`."""
    return f"startup-v{_VERSION}-{name}.json"


class Saver:
    """When a cache is written back: at the exit of a process that added to it. A forked
    worker that added nothing does not write what its parent added: the parent does."""

    def __init__(self, write: Callable[[], None]) -> None:
        self._write = write  # writes the cache (calls `take` first)
        self._dirty = False
        self._pid: int | None = None  # the process whose exit writes what it added

    def added(self) -> None:
        """Something was added in this process: its exit writes the cache."""
        self._dirty = True
        if self._pid != os.getpid():
            self._pid = os.getpid()
            atexit.register(self._write)

    def take(self) -> bool:
        """Whether this process has additions to write; they count as written from now."""
        if not self._dirty or self._pid != os.getpid():
            return False
        self._dirty = False
        return True

    def forget(self) -> None:
        """Nothing is to be written (the cache was dropped from memory)."""
        self._dirty = False


def folder() -> Path | None:
    """Where the cache lives, or None when it is turned off or no place is known."""
    if os.environ.get("TRIAGE_NO_CACHE", "") not in ("", "0"):
        return None
    explicit = os.environ.get("TRIAGE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or (
        os.path.join(os.environ["HOME"], ".cache") if os.environ.get("HOME") else None
    )
    return Path(base) / "triage" if base else None


def section(name: str) -> dict[str, Any]:
    """The cached values of one kind (its file read on first use); an empty dict when off."""
    values = _sections.get(name)
    if values is None:
        values = _sections[name] = _read_section(name)
    return values


def _read_section(name: str) -> dict[str, Any]:
    where = folder()
    if where is None:
        return {}
    try:
        text = (where / section_file(name)).read_text(encoding="utf-8")
    except OSError:
        return {}
    # thousands of small lists and dicts, none of them garbage: the cyclic GC's passes while
    # they are made would cost more than the parse
    enabled = gc.isenabled()
    gc.disable()
    try:
        loaded = json.loads(text)
    except ValueError:
        return {}
    finally:
        if enabled:
            gc.enable()
    if not isinstance(loaded, dict) or loaded.get("version") != _VERSION:
        return {}
    values = loaded.get("values")
    return values if isinstance(values, dict) else {}


def put(name: str, key: str, value: Any) -> None:
    """Keep `value` under `key`, if JSON gives it back exactly."""
    try:
        if json.loads(json.dumps(value)) != value:
            return
    except (TypeError, ValueError):  # a date, a NaN, a non-string key
        return
    values = section(name)
    if len(values) >= _MAX_ENTRIES:
        values.clear()
    values[key] = value
    _changed.add(name)
    # written at exit too: what is derived after start-up (the literals of a rule's `not` and
    # `all` patterns, read when an event first needs them) is kept, not only what the
    # knowledge load derived before its own save
    _saver.added()


_DIGEST = 32  # bytes of SHA-256 at the head of a verified file


def write_atomically(path: Path, body: bytes, prefix: str = ".cache-") -> None:
    """Write `body` to `path` through a temporary file beside it: a reader sees the old file
    or the new one, never a torn one. OSError when it cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_verified(path: Path, body: bytes, prefix: str = ".cache-") -> None:
    """`body` after its SHA-256, written atomically (`read_verified` gives it back)."""
    write_atomically(path, hashlib.sha256(body).digest() + body, prefix)


def read_verified(path: Path) -> memoryview | None:
    """What `write_verified` wrote, or None when the file is missing, torn or altered."""
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    body = memoryview(blob)[_DIGEST:]
    if len(blob) <= _DIGEST or hashlib.sha256(body).digest() != blob[:_DIGEST]:
        return None
    return body


def only_mine(path: Path) -> bool:
    """Whether only this user can have written `path`: a cache whose content is run or
    trusted as code (compiled patterns, code objects) is read only then, as ssh refuses a key
    somebody else could write; the same user could as well change triage itself."""
    getuid = getattr(os, "getuid", None)
    st = path.stat()
    return getuid is not None and st.st_uid == getuid() and not st.st_mode & 0o022


def read_trusted_marshal(path: Path) -> Any:
    """The marshal'd value `write_verified` kept at `path`, or None: read only when this user
    alone can have written the file and its folder (`only_mine`), whole (`read_verified`) and
    decodable. For caches whose content runs as triage's own code."""
    try:
        if not only_mine(path) or not only_mine(path.parent):
            return None
        body = read_verified(path)
        return None if body is None else _loads_whole(body)
    except (OSError, ValueError, EOFError, TypeError):
        return None


def _loads_whole(body: memoryview) -> Any:
    """`marshal.loads`, the cyclic GC off meanwhile: a cache file holds thousands of lists
    and tuples, none of them garbage, and each collection that their making sets off walks
    every object the process holds (a run's start-up read two caches' ~1 MB each in ~25 ms
    with it on, ~5 ms without)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return marshal.loads(body)
    finally:
        if enabled:
            gc.enable()


def entries_body(tag: tuple[str, Any], entries: dict[tuple[Any, int], Any], **extra: Any) -> bytes:
    """A marshal cache of `(text, flags) -> value` entries, named by its `tag` (a key and the
    versions the entries hold for), as `read_trusted_entries` reads it back; `extra` fields
    (marshal-able) ride along, for `read_trusted_marshal` to give back."""
    return marshal.dumps({**extra, tag[0]: tag[1], "entries": dict(entries)})


def read_trusted_entries(
    path: Path | None,
    tag: tuple[str, Any],
    texts: tuple[type, ...],
    value_ok: Callable[[Any], bool],
) -> dict[tuple[Any, int], Any]:
    """The entries `entries_body` kept at `path`, read as `read_trusted_marshal` reads: none
    unless the file's tag is `tag`, and of them only `(text, flags)` keys with a text of one
    of `texts` and values `value_ok` accepts (a damaged or foreign entry is not used)."""
    loaded = None if path is None else read_trusted_marshal(path)
    return checked_entries(loaded, tag, texts, value_ok)


def checked_entries(
    loaded: Any,
    tag: tuple[str, Any],
    texts: tuple[type, ...],
    value_ok: Callable[[Any], bool],
) -> dict[tuple[Any, int], Any]:
    """The entries of a file `read_trusted_marshal` gave back, checked as
    `read_trusted_entries` checks them."""
    if not isinstance(loaded, dict) or loaded.get(tag[0]) != tag[1]:
        return {}
    entries = loaded.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {
        k: v
        for k, v in entries.items()
        if isinstance(k, tuple)
        and len(k) == 2
        and isinstance(k[0], texts)
        and isinstance(k[1], int)
        and value_ok(v)
    }


def save() -> None:
    """Write the sections added to this run (atomically; a failure leaves the old file)."""
    where = folder()
    if where is None or not _saver.take():
        return
    for name in sorted(_changed):
        body = json.dumps({"version": _VERSION, "values": _sections.get(name, {})})
        with contextlib.suppress(OSError):  # a cache that cannot be written is no error
            write_atomically(where / section_file(name), body.encode("utf-8"), ".startup-")
    _changed.clear()


def clear_memory() -> None:
    """Forget what was loaded (tests that change the environment)."""
    _sections.clear()
    _changed.clear()
    _saver.forget()


_saver = Saver(save)
