"""Compiled `regex` patterns, kept on disk between runs and verified before use.

The `regex` module parses and compiles a pattern in Python: the ~700 rule, cascade, mask
and routine patterns a small job's run needs cost ~0.15-0.5 s of its ~1 s (more than its
parsing). What the parser produces is plain data (a list of opcodes, the group names, the
required string) that the module hands to its C engine; that data is a pure function of the
pattern, its flags and the module's version. So it is recorded when a pattern compiles and
kept in one file in the cache folder (`triage.diskcache.folder()`; `TRIAGE_NO_CACHE=1`
turns it off), named by the `regex` and Python versions. The file starts with the SHA-256
of the rest: a torn or altered file is ignored, and so is any entry the engine refuses;
then the pattern compiles as always. The engine trusts the opcodes it is given (wrong ones
can crash it), so the file is read only when this user alone can have written it and its
folder: the same user could as well change triage itself.

Only what this module cannot know changes nothing: a pattern with named lists or the
LOCALE flag is never kept (its code depends on more than its text).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import marshal
import os
import sys
import threading
from pathlib import Path
from typing import Any

import regex

from triage import diskcache

_MAX_ENTRIES = 5_000  # team folders come and go; past this the file starts afresh
_ARGS = 10  # what the engine takes after the pattern: flags, code, groups, required string

_lock = threading.Lock()
_local = threading.local()
_compiled: dict[tuple[str, int], regex.Pattern[str]] = {}
_stored: dict[tuple[str, int], tuple[Any, ...]] | None = None
_dirty = False
_saver_pid: int | None = None


class _Recorder:
    """Stands in for the `regex` module's C engine: passes every call on and keeps, per
    thread, the arguments of the last compile (what the disk keeps)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def compile(self, *args: Any) -> Any:
        _local.last = args
        return self._engine.compile(*args)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # `regex` pickles a pattern as (its engine's `compile`, the pattern's data): the
        # engine, by name, is what another process compiles it with
        return importlib.import_module, (self._engine.__name__,)


def _engine() -> Any:
    """The C engine `regex` compiles into, with the recorder in front (installed once); None
    when this version of `regex` is not laid out as expected (then nothing is kept)."""
    main = getattr(regex, "_main", None) or sys.modules.get("regex._main")
    engine = getattr(main, "_regex", None)
    if engine is None or not callable(getattr(engine, "compile", None)):
        return None
    if not isinstance(engine, _Recorder):
        main._regex = engine = _Recorder(engine)  # type: ignore[union-attr]
    return engine


def _file() -> Path | None:
    where = diskcache.folder()
    if where is None:
        return None
    version = f"{getattr(regex, '__version__', '?')}-py{sys.version_info[0]}{sys.version_info[1]}"
    return where / f"regex-{version}.bin"


def _key_version() -> int:
    return int(getattr(regex, "DEFAULT_VERSION", 0))


def _load() -> dict[tuple[str, int], tuple[Any, ...]]:
    path = _file()
    if path is None:
        return {}
    try:
        if not _own(path) or not _own(path.parent):
            return {}
        body = diskcache.read_verified(path)
        if body is None:
            return {}
        loaded = marshal.loads(body)
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not isinstance(loaded, dict) or loaded.get("default_version") != _key_version():
        return {}
    entries = loaded.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {
        k: v
        for k, v in entries.items()
        if isinstance(k, tuple)
        and len(k) == 2
        and isinstance(k[0], str)
        and isinstance(k[1], int)
        and isinstance(v, tuple)
        and len(v) == _ARGS
    }


def _own(path: Path) -> bool:
    """Whether only this user can have written `path` (the engine trusts the opcodes: a file
    somebody else could write is not read, as ssh refuses such keys)."""
    getuid = getattr(os, "getuid", None)
    st = path.stat()
    return getuid is not None and st.st_uid == getuid() and not st.st_mode & 0o022


def _stored_entries() -> dict[tuple[str, int], tuple[Any, ...]]:
    global _stored
    if _stored is None:
        _stored = _load()
    return _stored


def save() -> None:
    """Write what was added in this process (atomically; a failure leaves the old file)."""
    global _dirty
    path = _file()
    with _lock:
        if not _dirty or path is None or _stored is None or os.getpid() != _saver_pid:
            return
        _dirty = False
        body = marshal.dumps({"default_version": _key_version(), "entries": dict(_stored)})
    with contextlib.suppress(OSError):  # a cache that cannot be written is no error
        diskcache.write_verified(path, body, ".regex-")


def _from_disk(pattern: str, flags: int, engine: Any) -> regex.Pattern[str] | None:
    args = _stored_entries().get((pattern, flags))
    if args is None:
        return None
    try:
        flags_, *middle, req_flags, groups = args
        compiled = engine.compile(
            pattern, regex.RegexFlag(flags_), *middle, regex.RegexFlag(req_flags), groups
        )
    except Exception:  # noqa: BLE001 - an entry the engine refuses: compile as always
        return None
    if not isinstance(compiled, regex.Pattern) or compiled.pattern != pattern:
        return None
    return compiled  # type: ignore[no-any-return]


def _record(pattern: str, flags: int) -> regex.Pattern[str]:
    global _dirty, _saver_pid
    _local.last = None
    compiled = regex.compile(pattern, flags, cache_pattern=False)
    args = _local.last
    _local.last = None
    if (
        isinstance(args, tuple)
        and len(args) == _ARGS + 1
        and args[0] == pattern
        and not args[5]  # named lists: their code depends on the lists given
        and not int(args[1]) & regex.LOCALE
    ):
        try:
            # the flags and the required string's flags are RegexFlag: kept as ints
            kept = (int(args[1]), *args[2:9], int(args[9]), *args[10:])
            marshal.dumps(kept)
        except (ValueError, TypeError):
            return compiled  # type: ignore[no-any-return]
        stored = _stored_entries()
        with _lock:
            if len(stored) >= _MAX_ENTRIES:
                stored.clear()
            stored[(pattern, flags)] = kept
            _dirty = True
            if _saver_pid != os.getpid():
                _saver_pid = os.getpid()
                atexit.register(save)
    return compiled  # type: ignore[no-any-return]


def compile(pattern: str, flags: int = 0) -> regex.Pattern[str]:  # noqa: A001 - regex's name
    """`regex.compile(pattern, flags)`, from the disk cache when it holds the pattern.

    Raises `regex.error` for a bad pattern, exactly as `regex.compile` does.
    """
    flags = int(flags)
    key = (pattern, flags)
    found = _compiled.get(key)
    if found is not None:
        return found
    engine = _engine() if isinstance(pattern, str) else None
    if engine is None:
        return regex.compile(pattern, flags)  # type: ignore[no-any-return]
    compiled = _from_disk(pattern, flags, engine) or _record(pattern, flags)
    _compiled[key] = compiled
    return compiled


def clear_memory() -> None:
    """Forget what was loaded and compiled in this process (tests that change the cache)."""
    global _stored, _dirty
    with _lock:
        _compiled.clear()
        _stored, _dirty = None, False
