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

The stdlib's `re` works the same way (`compile_std`): its parser and code generator are
Python too, and the ~280 plain patterns a run compiles with it (the atlas's templates, the
redaction, line templates and log shapes) cost ~5% of a small job's run. Its file is named
by the Python version and the engine's MAGIC, and CPython's engine checks the code it is
given besides.
"""

from __future__ import annotations

import contextlib
import importlib
import marshal
import re
import re._compiler
import re._constants
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, AnyStr

import regex

from triage import diskcache

_MAX_ENTRIES = 5_000  # team folders come and go; past this the file starts afresh
# the atlas's ~1.3 KB patterns differ from job to job: a bounded file stays cheap to read
_MAX_STD_ENTRIES = 2_000
_ARGS = 10  # what the engine takes after the pattern: flags, code, groups, required string

_STD_ARGS = 5  # what the stdlib's engine takes after the pattern: flags, code, groups, names

_lock = threading.Lock()
_local = threading.local()
_compiled: dict[tuple[str, int], regex.Pattern[str]] = {}
_compiled_std: dict[tuple[str | bytes, int], re.Pattern[Any]] = {}


class _Store:
    """One file of engine arguments by (pattern, flags): loaded on first use, written at exit
    by the process that added to it.

    Each write is one generation of the file, and each entry keeps the last generation whose
    run used it: a write drops the entries none of the last `_KEEP_WRITES` writing runs used,
    so the patterns an older version or a team folder since removed compiled are not loaded
    by every run for ever (a run that only reads writes nothing: it stays cheap)."""

    def __init__(
        self, name: Callable[[], str], args: int, tag: Callable[[], Any], most: int
    ) -> None:
        self._name = name  # the file's name: the versions its entries hold for
        self._args = args  # how many arguments an entry holds
        self._tag = tag  # what else the entries were made with (checked when read)
        self._most = most  # entries at most: past this the file starts afresh
        self.entries: dict[tuple[str | bytes, int], tuple[Any, ...]] | None = None
        self._generation = 0  # the file's writes so far
        self._last_used: dict[tuple[str | bytes, int], int] = {}  # entry -> its generation
        self._used: set[tuple[str | bytes, int]] = set()  # entries this process used
        self._saver = diskcache.Saver(self.save)

    def file(self) -> Path | None:
        where = diskcache.folder()
        return None if where is None else where / self._name()

    def stored(self) -> dict[tuple[str | bytes, int], tuple[Any, ...]]:
        if self.entries is None:
            self.entries = self._load()
        return self.entries

    def _load(self) -> dict[tuple[str | bytes, int], tuple[Any, ...]]:
        path = self.file()
        loaded = None if path is None else diskcache.read_trusted_marshal(path)
        entries = diskcache.checked_entries(
            loaded,
            ("default_version", self._tag()),
            (str, bytes),
            lambda v: isinstance(v, tuple) and len(v) == self._args,
        )
        kept: dict[str, Any] = loaded if entries and isinstance(loaded, dict) else {}
        generation, last_used = kept.get("generation"), kept.get("last_used")
        # a file an earlier triage wrote has neither: its entries count as used at its start
        self._generation = generation if type(generation) is int else 0
        self._last_used = {
            k: g
            for k, g in (last_used.items() if isinstance(last_used, dict) else ())
            if k in entries and type(g) is int
        }
        return entries

    def used(self, key: tuple[str | bytes, int]) -> None:
        """An entry this run used (from the disk or just added): kept at the next write."""
        self._used.add(key)

    def put(self, key: tuple[str | bytes, int], kept: tuple[Any, ...]) -> None:
        stored = self.stored()
        with _lock:
            if len(stored) >= self._most:
                stored.clear()
            stored[key] = kept
            self._used.add(key)
            self._saver.added()

    def save(self) -> None:
        path = self.file()
        with _lock:
            if path is None or self.entries is None or not self._saver.take():
                return
            generation = self._generation + 1
            for key in self._used:
                self._last_used[key] = generation
            oldest = generation - _KEEP_WRITES
            self.entries = {
                k: v for k, v in self.entries.items() if self._last_used.get(k, 0) > oldest
            }
            self._last_used = {k: self._last_used.get(k, 0) for k in self.entries}
            self._generation = generation
            body = diskcache.entries_body(
                ("default_version", self._tag()),
                self.entries,
                generation=generation,
                last_used=self._last_used,
            )
        with contextlib.suppress(OSError):  # a cache that cannot be written is no error
            diskcache.write_verified(path, body, ".regex-")

    def clear(self) -> None:
        with _lock:
            self.entries = None
            self._generation = 0
            self._last_used = {}
            self._used = set()
            self._saver.forget()


# An entry none of this many writing runs used is dropped at the next write: what one
# version's runs all use is stamped at each write, what only an older version used ages out
# (a rarely run command's patterns too: they are compiled again once, ~1 ms each).
_KEEP_WRITES = 8


def _regex_file() -> str:
    version = f"{getattr(regex, '__version__', '?')}-py{sys.version_info[0]}{sys.version_info[1]}"
    return f"regex-{version}.bin"


def _std_file() -> str:
    magic = getattr(re._constants, "MAGIC", "?")  # type: ignore[attr-defined]
    return f"re-py{sys.version_info[0]}{sys.version_info[1]}-{magic}.bin"


def _std_tag() -> str:
    return sys.version  # the stdlib's code generator may differ between patch releases


_REGEX = _Store(_regex_file, _ARGS, lambda: _key_version(), _MAX_ENTRIES)
_STD = _Store(_std_file, _STD_ARGS, _std_tag, _MAX_STD_ENTRIES)


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
    return _recorded(getattr(regex, "_main", None) or sys.modules.get("regex._main"), "_regex")


def _recorded(module: Any, name: str) -> Any:
    """`module.name`, a C engine with a `compile`, with the recorder put in front of it once;
    None when the module does not hold one."""
    engine = getattr(module, name, None)
    if engine is None or not callable(getattr(engine, "compile", None)):
        return None
    if not isinstance(engine, _Recorder):
        engine = _Recorder(engine)
        setattr(module, name, engine)
    return engine


def _key_version() -> int:
    return int(getattr(regex, "DEFAULT_VERSION", 0))


def save() -> None:
    """Write what was added in this process (atomically; a failure leaves the old file)."""
    _REGEX.save()
    _STD.save()


def _from_disk(pattern: str, flags: int, engine: Any) -> regex.Pattern[str] | None:
    args = _REGEX.stored().get((pattern, flags))
    if args is None:
        return None
    _REGEX.used((pattern, flags))
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
        _REGEX.put((pattern, flags), kept)
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


def compile_std(pattern: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """`re.compile(pattern, flags)` (the stdlib's engine), from the disk cache when it holds
    the pattern. Raises `re.error` for a bad pattern, exactly as `re.compile` does."""
    flags = int(flags)
    key = (pattern, flags)
    found = _compiled_std.get(key)
    if found is not None:
        return found
    engine = _sre_engine()
    if engine is None:
        return re.compile(pattern, flags)
    compiled = _std_from_disk(pattern, flags, engine) or _std_record(pattern, flags)
    _compiled_std[key] = compiled
    return compiled


def _sre_engine() -> Any:
    """The stdlib's C engine with the recorder in front (installed once); None when `re` is
    not laid out as expected (then nothing is kept)."""
    return _recorded(sys.modules.get("re._compiler"), "_sre")


def _std_from_disk(pattern: AnyStr, flags: int, engine: Any) -> re.Pattern[AnyStr] | None:
    args = _STD.stored().get((pattern, flags))
    if args is None:
        return None
    _STD.used((pattern, flags))
    try:
        compiled = engine.compile(pattern, *args)
    except Exception:  # noqa: BLE001 - an entry the engine refuses: compile as always
        return None
    if not isinstance(compiled, re.Pattern) or compiled.pattern != pattern:
        return None
    return compiled


def std_engine_args(compiled: re.Pattern[AnyStr]) -> tuple[Any, ...] | None:
    """What the stdlib's engine was given to make `compiled` (its pattern, flags, code and
    groups), for `std_from_engine_args` to make it again without parsing; None when `re` is
    not laid out as expected."""
    if _sre_engine() is None:
        return None
    _local.last = None
    re._compiler.compile(compiled.pattern, compiled.flags)  # type: ignore[attr-defined]
    args = _local.last
    _local.last = None
    if not isinstance(args, tuple) or len(args) != _STD_ARGS + 1:
        return None
    # the opcodes are named ints, which refuse to pickle: plain ints, as the disk keeps them
    pattern, flags, code, groups, groupindex, indexgroup = args
    return pattern, int(flags), [int(op) for op in code], int(groups), dict(groupindex), indexgroup


def std_from_engine_args(*args: Any) -> re.Pattern[Any]:
    """The pattern `std_engine_args` gave the making of (the engine checks the code)."""
    engine = _sre_engine()
    if engine is None:  # pragma: no cover - the args came from this Python's engine
        return re.compile(args[0], args[1])
    compiled = engine.compile(*args)
    if not isinstance(compiled, re.Pattern):  # pragma: no cover
        raise TypeError("not a compiled pattern")
    return compiled


def _std_record(pattern: AnyStr, flags: int) -> re.Pattern[AnyStr]:
    _local.last = None
    # `re`'s own cache would hand back a pattern compiled before the recorder was there
    compiled = re._compiler.compile(pattern, flags)  # type: ignore[attr-defined]
    args = _local.last
    _local.last = None
    if (
        isinstance(args, tuple)
        and len(args) == _STD_ARGS + 1
        and args[0] == pattern
        and not int(args[1]) & (re.LOCALE | re.DEBUG)  # what the code alone does not say
    ):
        try:
            # the flags may be a RegexFlag and the opcodes are named ints: kept as ints
            kept = (
                int(args[1]),
                [int(op) for op in args[2]],
                int(args[3]),
                dict(args[4]),
                tuple(args[5]),
            )
            marshal.dumps(kept)
        except (ValueError, TypeError):
            return compiled
        _STD.put((pattern, flags), kept)
    return compiled


def clear_memory() -> None:
    """Forget what was loaded and compiled in this process (tests that change the cache)."""
    with _lock:
        _compiled.clear()
        _compiled_std.clear()
    _REGEX.clear()
    _STD.clear()
