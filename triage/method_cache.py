"""The methods `dataclasses` writes for triage's records, compiled once and kept on disk.

`dataclasses` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__` (and a frozen
class's `__setattr__` and `__delattr__`) as source text and compiles it with `exec`: the ~170
record classes a run defines cost ~900 compiles, ~0.05-0.09 s of a small job's ~0.5 s. A
compiled text is a pure function of that text, the compiler flags and the Python version, so
the code objects are kept in one file in the cache folder (`triage.diskcache.folder()`;
`TRIAGE_NO_CACHE=1` turns it off), keyed by the text itself and named by the bytecode
version. The file starts with the SHA-256 of the rest (a torn or altered file is ignored) and
is read only when this user alone can have written it and its folder, as for the compiled
patterns of `triage.regex_cache`: the code runs as triage's own. A text not in it compiles as
`exec` compiles it; so does everything when no cache folder is known.

`install()` puts the cached compile in front of `dataclasses`' own `exec` (a name of that
module alone): what `exec` runs, with which globals and locals, is unchanged, and only
classes of triage's own modules go through the cache.
"""

from __future__ import annotations
import __future__

import builtins
import contextlib
import dataclasses
import importlib.util
import sys
import threading
import types
from pathlib import Path
from typing import Any

from triage import diskcache

_MAX_ENTRIES = 5_000  # records come and go between releases; past this the file starts afresh
# the compiler flags a caller's `from __future__ import ...` passes on to `exec`
_FUTURE_FLAGS = 0
for _name in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _name).compiler_flag

_lock = threading.Lock()
_entries: dict[tuple[str, int], types.CodeType] | None = None


def install() -> None:
    """Have `dataclasses` compile through the cache (once; nothing when no cache folder)."""
    if diskcache.folder() is None or vars(dataclasses).get("exec") is _exec:
        return
    dataclasses.exec = _exec  # type: ignore[attr-defined]


def _exec(source: Any, globals: dict[str, Any] | None = None, locals: Any = None, /) -> None:
    """`exec` as `dataclasses` calls it, a text compiled from the cache."""
    caller = sys._getframe(1)
    if globals is None:  # exec's defaults: the caller's namespaces
        globals = caller.f_globals
        if locals is None:
            locals = caller.f_locals
    # triage's own records only: a user's dataclasses (triage imported as a library) compile
    # as they always do, and none of their text lands in triage's cache
    if isinstance(source, str) and _is_triage(globals):
        source = _compiled(source, caller.f_code.co_flags & _FUTURE_FLAGS)
    builtins.exec(source, globals, locals)


def _is_triage(namespace: Any) -> bool:
    """Whether `dataclasses` compiles for a class of triage's (it passes the class's module
    namespace as the globals)."""
    name = namespace.get("__name__") if isinstance(namespace, dict) else None
    return isinstance(name, str) and (name == "triage" or name.startswith("triage."))


def _compiled(text: str, flags: int) -> types.CodeType:
    key = (text, flags)
    entries = _stored()
    code = entries.get(key)
    if code is None:
        # what `exec` does with a text: compiled as "<string>" with the caller's future flags
        code = compile(text, "<string>", "exec", flags=flags, dont_inherit=True)
        _put(key, code)
    return code


def _file() -> Path | None:
    where = diskcache.folder()
    return None if where is None else where / f"dataclass-code-{_tag().hex()}.bin"


def _tag() -> bytes:
    return importlib.util.MAGIC_NUMBER  # what a code object's marshal form depends on


def _stored() -> dict[tuple[str, int], types.CodeType]:
    global _entries
    if _entries is None:
        _entries = _load()
    return _entries


def _load() -> dict[tuple[str, int], types.CodeType]:
    return diskcache.read_trusted_entries(
        _file(), ("version", sys.version), (str,), lambda v: isinstance(v, types.CodeType)
    )


def _put(key: tuple[str, int], code: types.CodeType) -> None:
    entries = _stored()
    with _lock:
        if len(entries) >= _MAX_ENTRIES:
            entries.clear()
        entries[key] = code
        _saver.added()


def save() -> None:
    """Write what was compiled in this process (atomically; a failure leaves the old file)."""
    path = _file()
    with _lock:
        if path is None or _entries is None or not _saver.take():
            return
        body = diskcache.entries_body(("version", sys.version), _entries)
    with contextlib.suppress(OSError):  # a cache that cannot be written is no error
        diskcache.write_verified(path, body, ".dataclass-")


def clear_memory() -> None:
    """Forget what was loaded and compiled in this process (tests that change the cache)."""
    global _entries
    with _lock:
        _entries = None
        _saver.forget()


_saver = diskcache.Saver(save)
