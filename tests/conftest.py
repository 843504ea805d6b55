"""Test-session settings every test shares."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# The start-up cache (triage/diskcache.py) goes to a folder of this session's own, never to the
# user's ~/.cache: tests and the subprocesses they start must not leave files behind or read a
# cache an earlier checkout wrote.
_CACHE = tempfile.mkdtemp(prefix="triage-test-cache-")
os.environ["TRIAGE_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
