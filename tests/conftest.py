"""Test-session settings every test shares."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# The start-up cache (triage/diskcache.py) goes to a folder of this session's own, never to the
# user's ~/.cache: tests and the subprocesses they start must not leave files behind or read a
# cache an earlier checkout wrote.
_CACHE = tempfile.mkdtemp(prefix="triage-test-cache-")
os.environ["TRIAGE_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache folder of the test's own (not there yet), the caches' memory of any other
    forgotten before and after: what a test reads back comes from this folder alone."""
    from triage import diskcache, method_cache, regex_cache

    folder = tmp_path / "cache"
    monkeypatch.setenv("TRIAGE_CACHE_DIR", str(folder))
    monkeypatch.delenv("TRIAGE_NO_CACHE", raising=False)
    for cache in (diskcache, method_cache, regex_cache):
        cache.clear_memory()
    yield folder
    for cache in (diskcache, method_cache, regex_cache):
        cache.clear_memory()
