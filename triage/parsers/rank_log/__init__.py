"""The main log parser: one rank's (or a whole job's interleaved) console output -> events.

It turns a log into the events that matter: whole Python tracebacks (chained exceptions kept,
several ranks interleaved line by line told apart by their prefixes), C++ `terminate called`
blocks, c10/glog error and warning lines with the watchdog facts in them, torchrun / DeepSpeed /
Slurm / kernel exit and signal lines, torchrun's `ChildFailedError` summary blocks, NCCL lines
(through `nccl.py`) and one PROGRESS summary per rank.

Speed: a big log is read in chunks; a marker scan (`LogScanTables`) finds the few lines with a
word that can matter and only those (plus every line while a multi-line record is open) are
decoded and parsed.
Progress is read backwards from the tail of each chunk, far enough to find every stream that
progressed in the previous chunk (samples of the first chunk find streams that stopped early);
on this path a stream's last step and last epoch come from its last progress line only. A line
of those windows mostly costs one dict lookup: what matters about it is cached per digit-masked
line (a stream's progress lines differ in their numbers).
Small inputs (pasted text, files under `SCAN_ALL_BELOW`) are read line by line in full.
Memory is bounded: a chunk, capped records, capped event and warning counts.

Times: an event's `time` is its own line's timestamp; events whose lines carry none (tracebacks,
C++ blocks) get `time_before`, the latest time seen earlier in the file,
`stream_time_before`, the latest of its own output stream (a rank's prefix), and
`time_after`, the first of the launcher's unprefixed lines after it.

The package's modules, in the order a line meets them: `limits`, `formats` (line and message
shapes), `needles` (the scan), `driver` (chunks and lines), `line_events` (one line),
`records` (multi-line records), `events` (records to events), `facts` (what a message says),
`progress`.
"""

from triage.parsers.rank_log.driver import parse
from triage.parsers.rank_log.limits import (
    MAX_EVENTS,
    MAX_FRAMES,
    MAX_WARNINGS,
    PROGRESS_WINDOW,
    SCAN_ALL_BELOW,
)
from triage.parsers.rank_log.needles import (
    MUTE_COMMS,
    SPECIFIC_NEEDLE,
    LogScanTables,
    rule_needles,
    scan_tables,
)
from triage.parsers.rank_log.progress import PROGRESS_MARKERS

__all__ = [
    "MAX_EVENTS",
    "MAX_FRAMES",
    "MAX_WARNINGS",
    "MUTE_COMMS",
    "PROGRESS_MARKERS",
    "PROGRESS_WINDOW",
    "SCAN_ALL_BELOW",
    "SPECIFIC_NEEDLE",
    "LogScanTables",
    "parse",
    "rule_needles",
    "scan_tables",
]
