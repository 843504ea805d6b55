"""Compiled hyperscan databases, kept on disk between runs and verified before use.

The log scan's databases take ~0.2 s to compile (the main one holds ~750 patterns), and
every CLI run compiles them before its workers can fork: a fixed cost that a 400 MB bundle
pays as much as a 1 KB one. They are pure functions of their patterns, so each is kept as a
file in the cache folder (`triage.diskcache.folder()`; `TRIAGE_NO_CACHE=1` turns it off),
named by a hash of everything that went into it (hyperscan's version, the machine, every
pattern, id and flag). The file starts with the SHA-256 of the serialized database after
it: a torn or altered file is not loaded but compiled again and rewritten. hyperscan
itself refuses a database built for another version or CPU; that too falls back to
compiling. Nothing here can run code: a database only ever reports matches.
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from triage import diskcache

_SUBFOLDER = "hyperscan-v1"
# Databases kept (a run makes ~5; each team folder or rules change adds its own): past this
# the oldest are removed when a new one is written.
MAX_FILES = 64


def _key(
    hs: Any, expressions: Sequence[bytes], ids: Sequence[int], flags: Any, literal: bool
) -> str:
    h = hashlib.sha256()
    for part in (hs.__version__, platform.machine(), literal, list(ids), flags):
        h.update(repr(part).encode())
        h.update(b"\0")
    # one update of the whole stream (the same digest as one per piece, ~2,400 calls fewer)
    h.update(b"".join(b"%b%b" % (len(e).to_bytes(4, "little"), e) for e in expressions))
    return h.hexdigest()


def _path(key: str) -> Path | None:
    where = diskcache.folder()
    return where / _SUBFOLDER / f"{key}.hsdb" if where is not None else None


def _load(hs: Any, path: Path) -> Any:
    """The database in `path`, or None when it is missing, damaged or for another build."""
    body = diskcache.read_verified(path)
    if body is None:
        return None
    try:
        return hs.loadb(bytes(body), hs.HS_MODE_BLOCK)
    except Exception:  # noqa: BLE001 - another version's or CPU's database: compile again
        return None


def _save(hs: Any, path: Path, db: Any) -> None:
    try:
        diskcache.write_verified(path, hs.dumpb(db), ".db-")
        _prune(path.parent)
    except Exception:  # noqa: BLE001 - a cache that cannot be written is no error
        pass


def _prune(folder: Path) -> None:
    """Keep the `MAX_FILES` most recently written databases."""
    files = sorted(folder.glob("*.hsdb"), key=lambda f: f.stat().st_mtime)
    for old in files[: max(len(files) - MAX_FILES, 0)]:
        old.unlink(missing_ok=True)


def database(
    hs: Any,
    expressions: Sequence[bytes],
    ids: Sequence[int],
    flags: int | Sequence[int],
    *,
    literal: bool = False,
) -> Any:
    """A block-mode database of `expressions`: loaded from the cache when a verified copy is
    there, else compiled (and kept for the next run)."""
    flag_list = flags if isinstance(flags, int) else list(flags)
    path = _path(_key(hs, expressions, ids, flag_list, literal))
    if path is not None:
        db = _load(hs, path)
        if db is not None:
            return db
    db = hs.Database(mode=hs.HS_MODE_BLOCK)
    if literal:
        db.compile(expressions=list(expressions), ids=list(ids), flags=flag_list, literal=True)
    else:
        db.compile(expressions=list(expressions), ids=list(ids), flags=flag_list)
    if path is not None:
        _save(hs, path, db)
    return db
