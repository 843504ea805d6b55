"""Compiled scan databases kept on disk: a verified copy finds what compiling finds, and a
damaged, foreign or missing one costs a compile, never a wrong or failed scan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from triage import diskcache
from triage.scan import hs_cache

hs = pytest.importorskip("hyperscan")

PATTERNS = [rb"Traceback \(most recent call last\)", rb"\bERROR\b", rb"NCCL WARN"]
TEXT = b"ok\nNCCL WARN x\nstep 3\nERROR: boom\nTraceback (most recent call last):\n"


def _matches(db: Any) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    db.scan(
        TEXT,
        match_event_handler=lambda i, _s, end, _f, _c: found.append((i, end)),
        scratch=hs.Scratch(db),  # as the log scan passes its own
    )
    return sorted(found)


def _build() -> Any:
    return hs_cache.database(hs, PATTERNS, [0, 1, 2], [0, 0, 0])


def _files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.hsdb"))


class _NoCompile:
    """Stands for hyperscan's Database where a test proves nothing is compiled."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("compiled although a verified copy was on disk")


def test_a_second_run_loads_the_database_and_finds_the_same_lines(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = _matches(_build())
    assert len(_files(cache_dir)) == 1
    monkeypatch.setattr(hs, "Database", _NoCompile)
    assert _matches(_build()) == compiled == [(0, 67), (1, 27), (2, 12)]


def test_a_damaged_copy_is_compiled_again_and_rewritten(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = _matches(_build())
    (path,) = _files(cache_dir)
    blob = bytearray(path.read_bytes())
    blob[-10] ^= 0xFF  # one byte of the database changed: its hash no longer holds
    path.write_bytes(bytes(blob))
    loaded: list[bytes] = []
    real_loadb = hs.loadb
    monkeypatch.setattr(hs, "loadb", lambda b, m: loaded.append(b) or real_loadb(b, m))
    assert _matches(_build()) == compiled
    assert loaded == []  # refused before hyperscan ever saw it
    assert path.read_bytes() != bytes(blob)  # a verified copy again
    assert _matches(_build()) == compiled and len(loaded) == 1


def test_a_copy_hyperscan_refuses_is_compiled_again(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = _matches(_build())

    def refuse(_blob: bytes, _mode: int) -> Any:
        raise hs.error("database was built for another platform")

    monkeypatch.setattr(hs, "loadb", refuse)
    assert _matches(_build()) == compiled


def test_other_patterns_or_flags_are_other_databases(cache_dir: Path) -> None:
    _build()
    caseless = hs_cache.database(hs, PATTERNS, [0, 1, 2], [hs.HS_FLAG_CASELESS] * 3)
    assert len(_files(cache_dir)) == 2
    found: list[int] = []
    caseless.scan(
        b"error here",
        match_event_handler=lambda i, *_: found.append(i),
        scratch=hs.Scratch(caseless),
    )
    assert found == [1]


def test_no_cache_writes_nothing(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIAGE_NO_CACHE", "1")
    assert diskcache.folder() is None
    assert len(_matches(_build())) == 3
    assert not cache_dir.exists()


def test_the_folder_keeps_only_the_newest_databases(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = hs_cache.MAX_FILES + 2
    for n in range(written):
        hs_cache.database(hs, [b"needle%d" % n], [0], [0])
    assert len(_files(cache_dir)) == hs_cache.MAX_FILES
    monkeypatch.setattr(hs, "Database", _NoCompile)  # the newest is kept: loaded, not compiled
    newest = hs_cache.database(hs, [b"needle%d" % (written - 1)], [0], [0])
    found: list[int] = []
    newest.scan(
        b"a needle%d" % (written - 1),
        match_event_handler=lambda i, *_: found.append(i),
        scratch=hs.Scratch(newest),
    )
    assert found == [0] and len(_files(cache_dir)) == hs_cache.MAX_FILES
