"""Timestamps found in training logs, turned into epoch seconds.

Formats (formats.md §1): c10 `[E1218 20:27:21.426415540 File.cpp:629]` and torch's glog-like
Python logging `E1202 08:35:28.255000 5442 path:line]` carry no year; DeepSpeed
`[2025-12-18 20:27:22,783]`, NCCL `[2025-01-05 10:00:00] `, Python logging asctime
`2025-01-05 10:12:08,123`, ISO `2025-01-05T10:12:08.123+02:00`, Megatron `[2025-01-05 10:12:08]`,
Colossal-AI `[01/05/26 10:12:08]` (MM/DD/YY), transformers' example scripts `01/05/2026 10:12:08`
(MM/DD/YYYY) and torchrun's summary `2026-01-05_10:12:08` do.

Every time without an offset is read as UTC: logs almost never say their zone, and the same
rule for every rank keeps their order right, which is what correlation needs.

Year-less formats take their year from a `YearHint`: the year of the first full timestamp in the
same file, else the file's modification time, else the current year. Across New Year: a month
more than half a year before a learned hint's month is read as next year (a December hint, a
January line); a month after the modification time's month is read as last year, since a file
is modified after its lines are written.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass

# One pattern for every dated format; tried on the first characters of a line.
_DATED = re.compile(
    r"(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[ T_](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:[.,](?P<frac>\d{1,9}))?"
    r"(?P<tz>Z|[+-]\d{2}:?\d{2}(?!\d))?"
)
# Colossal-AI's rich handler: `[01/05/26 10:12:08]` (month/day/two-digit year).
_SLASHED = re.compile(
    r"\[(?P<mo>\d{2})/(?P<d>\d{2})/(?P<y>\d{2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})\]"
)
# transformers' example scripts (run_clm.py, run_glue.py, ...) and the trainers grown from them
# log with `datefmt="%m/%d/%Y %H:%M:%S"`: `07/15/2023 12:51:00 - WARNING - name - message`.
_US_DATED = re.compile(
    r"(?<![\d/])(?P<mo>\d{2})/(?P<d>\d{2})/(?P<y>\d{4}) "
    r"(?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})(?![\d.:])"
)
# c10 (torch >= ~2.3): `[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629]`, month unpadded.
C10_RE = re.compile(
    r"\[(?P<lvl>[IWEF])(?P<md>\d{3,4}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})\.(?P<frac>\d+)"
    r" (?P<src>[\w./-]+):(?P<srcline>\d+)\] ?"
)
# torch's Python logging (>= ~2.4): `E1202 08:35:28.255000 5442 path/to/file.py:874] msg`.
GLOG_RE = re.compile(
    r"(?P<lvl>[DIWEFC])(?P<md>\d{4}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})\.(?P<frac>\d{1,9})"
    r" (?P<pid>\d+) (?P<src>\S+?):(?P<srcline>\d+)\] ?"
)


@dataclass
class YearHint:
    """The year (and month) that year-less timestamps of one file are read in."""

    year: int
    month: int = 0  # 0: unknown, no roll-over check
    learned: bool = False  # True once a full timestamp of the file itself set it

    @classmethod
    def from_mtime(cls, mtime: float | None) -> YearHint:
        when = time.gmtime(mtime if mtime is not None else time.time())
        return cls(year=when.tm_year, month=when.tm_mon if mtime is not None else 0)

    def learn(self, epoch: float) -> None:
        """Take the year of a full timestamp of the file; the first one wins."""
        if self.learned:
            return
        try:
            when = time.gmtime(epoch)
        except (OverflowError, OSError, ValueError):
            return
        self.year, self.month, self.learned = when.tm_year, when.tm_mon, True

    def year_for(self, month: int) -> int:
        if not self.month:
            return self.year
        if self.learned:
            # The hint came from earlier in the log: a much smaller month is next year.
            return self.year + 1 if month < self.month - 6 else self.year
        # The hint is the file's modification time, after every line: a later month is last year.
        return self.year - 1 if month > self.month else self.year


def _epoch(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str | None) -> float | None:
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h <= 24 and mi <= 59 and s <= 61):
        return None
    try:
        base = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    except (OverflowError, ValueError):
        return None
    if frac:
        base += int(frac) / 10 ** len(frac)
    return float(base)


def _offset_seconds(tz: str | None) -> int:
    if not tz or tz == "Z":
        return 0
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)


def parse_dated(text: str, *, limit: int = 64) -> float | None:
    """The first dated timestamp in the first `limit` characters of `text`, or None."""
    head = text[:limit]
    m = _DATED.search(head)
    if m is not None:
        epoch = _epoch(
            int(m["y"]),
            int(m["mo"]),
            int(m["d"]),
            int(m["h"]),
            int(m["mi"]),
            int(m["s"]),
            m["frac"],
        )
        if epoch is not None:
            return epoch - _offset_seconds(m["tz"])
    for pattern, century in ((_SLASHED, 2000), (_US_DATED, 0)):
        m = pattern.search(head)
        if m is not None:
            return _epoch(
                century + int(m["y"]),
                int(m["mo"]),
                int(m["d"]),
                int(m["h"]),
                int(m["mi"]),
                int(m["s"]),
                None,
            )
    return None


def dated_resolution(text: str, *, limit: int = 64) -> float:
    """Seconds the first dated stamp in `text` leaves open: 1.0 for one to the second
    (torchrun's summary `2026-01-05_10:12:08`), 0.001 for milliseconds; 0.0 when there is none."""
    m = _DATED.search(text[:limit])
    if m is None:
        slashed = _SLASHED.search(text[:limit]) or _US_DATED.search(text[:limit])
        return 1.0 if slashed is not None else 0.0
    return 10.0 ** -len(m["frac"]) if m["frac"] else 1.0


def month_day(md: str) -> tuple[int, int]:
    """`1218` -> (12, 18), `321` -> (3, 21), `0325` -> (3, 25): the day is always two digits."""
    return int(md[:-2]), int(md[-2:])


def yearless(md: str, h: str, mi: str, s: str, frac: str | None, hint: YearHint) -> float | None:
    """Epoch seconds of a c10/glog month-day time, the year taken from `hint`."""
    month, day = month_day(md)
    return _epoch(hint.year_for(month), month, day, int(h), int(mi), int(s), frac)


def parse_any(text: str, hint: YearHint | None = None) -> float | None:
    """A timestamp of any supported format near the start of `text` (None when there is none).

    Dated formats teach `hint` their year; c10/glog formats are read with it.
    """
    epoch = parse_dated(text)
    if epoch is not None:
        if hint is not None:
            hint.learn(epoch)
        return epoch
    head = text[:96]
    m = C10_RE.search(head) or GLOG_RE.search(head)
    if m is not None:
        return yearless(
            m["md"], m["h"], m["mi"], m["s"], m["frac"], hint or YearHint.from_mtime(None)
        )
    return None
