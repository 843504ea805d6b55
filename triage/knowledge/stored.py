"""The built knowledge kept on disk between runs, used only when verified to be current.

Building the knowledge (reading ~45 YAML files, checking each against its schema, making
~500 rules and their patterns) costs a CLI run ~0.1 s of CPU before any worker can fork; the
built object unpickles in about half that. So the first run that builds it keeps a pickle of
it in the cache folder (`triage.diskcache.folder()`; `TRIAGE_NO_CACHE=1` turns it off), and
later runs load that instead, under three guards:

- Current: the file is named by a SHA-256 of everything the build reads or depends on: the
  content of every knowledge file (each folder's YAML files and the package's own YAML, such
  as the taxonomy), the folders' paths, the size and modification time of every module of
  the package (the code that builds it and the classes it is made of, as Python's own
  bytecode cache checks a source), and the versions of triage, Python and `regex` (whose
  compiled patterns it holds). An edited rule file, a changed module or an upgrade names
  another file, which is not there: the knowledge is built again.
- Whole: the file starts with the SHA-256 of the rest (`diskcache.write_verified`); a torn
  or altered file is ignored.
- Trusted: unpickling can run code, so a file is read only when this user alone can have
  written it and its folder (`diskcache.only_mine`), as for the compiled patterns and code
  objects the other caches keep. In a shared or group-writable cache folder nothing is read.

Anything that goes wrong (no cache folder, a folder that cannot be written, a file that
does not load) falls back to building, as a run without the cache does.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import os
import pickle
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from triage import diskcache, regex_cache

_SUBFOLDER = "knowledge-v1"
_SUFFIX = ".pickle"
# Built knowledge kept (each rules folder, team folder or triage version has its own): past
# this the oldest are removed when a new one is written.
MAX_FILES = 8
# The package's own files the build can read or is made of (modules and shipped YAML), and
# the folders of it that hold neither (an install maps `rules/` and `models/` into it: the
# rules are hashed as a knowledge folder, the models are not read by the build).
_PACKAGE_SUFFIXES = (".py", ".yaml")
_DATA_PACKAGES = frozenset({"rules", "models"})

T = TypeVar("T")


def _package_root() -> Path:
    return Path(__file__).resolve().parent.parent


def fingerprint(folders: Sequence[tuple[Path, Sequence[Path]]], models: Path, lazy: bool) -> str:
    """The SHA-256 that names the knowledge built from `folders` (each with its YAML files, in
    order), the models folder `models` and the laziness `lazy`."""
    import regex

    import triage

    h = hashlib.sha256()

    def part(value: object) -> None:
        h.update(repr(value).encode("utf-8", "surrogateescape"))
        h.update(b"\0")

    part((_SUBFOLDER, triage.__version__, sys.version, regex.__version__, lazy, str(models)))
    for name, size, mtime_ns, path in _package_files(_package_root()):
        part((name, size, mtime_ns))
        if name.endswith(".yaml"):  # knowledge shipped in the package: its content
            with open(path, "rb") as fh:
                h.update(fh.read())
    for folder, files in folders:
        part(str(folder))
        for file in files:
            part(str(file))
            with open(file, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def _package_files(root: Path) -> list[tuple[str, int, int, str]]:
    """The package's modules and YAML files, in a stable order: (path inside the package,
    size, modification time in ns, path)."""
    found: list[tuple[str, int, int, str]] = []
    top = str(root)
    todo = [top]
    skip = len(top) + 1
    while todo:
        folder = todo.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    data = folder == top and entry.name in _DATA_PACKAGES
                    if entry.name != "__pycache__" and not data:
                        todo.append(entry.path)
                elif entry.name.endswith(_PACKAGE_SUFFIXES):
                    st = entry.stat()
                    found.append((entry.path[skip:], st.st_size, st.st_mtime_ns, entry.path))
    return sorted(found)


def _path(key: str) -> Path | None:
    where = diskcache.folder()
    return where / _SUBFOLDER / f"{key}{_SUFFIX}" if where is not None else None


def _read(path: Path, kind: type[T]) -> T | None:
    """The object kept at `path` when the file is trusted, whole and of `kind`, else None."""
    try:
        if not path.is_file() or not diskcache.only_mine(path):
            return None
        if not diskcache.only_mine(path.parent):
            return None
        body = diskcache.read_verified(path)
        if body is None:
            return None
        # ~25k objects, none of them garbage: the cyclic GC's passes over them while they
        # are made would cost about as much again as the unpickling
        enabled = gc.isenabled()
        gc.disable()
        try:
            value = pickle.loads(body)
        finally:
            if enabled:
                gc.enable()
    except Exception:  # noqa: BLE001 - a file that does not load is built again
        return None
    return value if isinstance(value, kind) else None


class _Pickler(pickle.Pickler):
    """Pickles the stdlib's compiled patterns with the code their engine was given (as
    `regex` pickles its own): `re` would otherwise parse each again when unpickled (~60 of
    them, ~0.1 ms each, before the workers can fork)."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is re.Pattern:
            args = regex_cache.std_engine_args(obj)
            if args is not None:
                return regex_cache.std_from_engine_args, args
        return NotImplemented


def _write(path: Path, value: object) -> None:
    with contextlib.suppress(Exception):  # a cache that cannot be written is no error
        out = io.BytesIO()
        _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
        diskcache.write_verified(path, out.getvalue(), ".knowledge-")
        _prune(path.parent)


def _prune(folder: Path) -> None:
    """Keep the `MAX_FILES` most recently written files."""
    files = sorted(folder.glob(f"*{_SUFFIX}"), key=lambda f: f.stat().st_mtime)
    for old in files[: max(len(files) - MAX_FILES, 0)]:
        old.unlink(missing_ok=True)


def load_or_build(key: Callable[[], str], kind: type[T], build: Callable[[], T]) -> T:
    """The knowledge kept under `key()` when a trusted, whole copy is there; else `build()`,
    kept for the next run. `key` is called only when a cache folder is known."""
    if diskcache.folder() is None:
        return build()
    try:
        path = _path(key())
    except OSError:  # a knowledge file vanished while hashed: the build reports it
        return build()
    if path is not None:
        kept = _read(path, kind)
        if kept is not None:
            return kept
    value = build()
    if path is not None:
        # kept as built, before any stage uses (and fills the caches of) it
        _write(path, value)
    return value
