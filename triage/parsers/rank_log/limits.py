"""The bounds of one log's parse: memory stays flat however big the log."""

from __future__ import annotations

MAX_EVENTS = 20_000
MAX_WARNINGS = 200  # generic warning lines kept per source
MAX_SAME_ERROR = 50  # identical error lines kept per source (after digits are masked)
TB_HEAD = 60  # traceback lines kept from the start ...
TB_TAIL = 60  # ... and from the end
MAX_FRAMES = 200
STALE_LINES = 400  # a record whose stream has been silent this long is closed
SCAN_ALL_BELOW = 64 << 10  # pasted text; bigger files take the marker-driven path
PROGRESS_WINDOW = 16 << 10
