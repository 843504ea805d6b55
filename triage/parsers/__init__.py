"""Parse stage: one module per input kind, each `parse(source) -> ParsedSource`.

Parsers never raise on bad input; whatever they cannot read becomes a warning. Modules are
imported on first use so that `triage explain` pays only for the log parser.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import re
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING

from triage.ingest.streams import stream_problem
from triage.model import ParsedSource, Source, SourceKind
from triage.parsers.common import MAX_PASTE, parser_stopped

if TYPE_CHECKING:
    from triage.knowledge import Knowledge

# kind -> module under triage.parsers that reads it
_MODULES: dict[SourceKind, str] = {
    SourceKind.RANK_LOG: "rank_log",
    SourceKind.TEXT: "rank_log",
    SourceKind.NCCL: "nccl",
    SourceKind.PYSPY: "pyspy",
    SourceKind.FLIGHT_RECORDER: "flight_recorder",
    SourceKind.ELASTIC_ERROR: "elastic_error",
    SourceKind.ENV_REPORT: "env_report",
}


def parse(
    source: Source, *, fr_tail: int | None = None, kb: Knowledge | None = None
) -> ParsedSource:
    """Parse one source with the parser of its kind; a parser bug becomes a warning.

    `kb` is the run's knowledge (the shipped one when None), which the log parser derives its
    scan from: a team folder's rules make their lines events in files as in pastes.

    `fr_tail`: of a flight-recorder dump, read only the header and the last `fr_tail`
    entries (what a big job can afford; see `flight_recorder`). A stream that ended early
    (corrupt or truncated data, a budget of the job used up) says so in the warnings: the
    parser read everything there was, but not everything the input holds.
    """
    if source.size == 0:
        return ParsedSource(source=source, events=(), warnings=())
    module = importlib.import_module(f"triage.parsers.{_MODULES[source.kind]}")
    opened: list[IO[bytes]] = []

    def open_tracked() -> IO[bytes]:
        stream = source.open()
        opened.append(stream)
        return stream

    tracked = dataclasses.replace(source, open=open_tracked)
    try:
        if fr_tail is not None and source.kind is SourceKind.FLIGHT_RECORDER:
            parsed = module.parse(tracked, tail=fr_tail)
        elif _MODULES[source.kind] == "rank_log":  # the one parser that reads the knowledge
            parsed = module.parse(tracked, kb=kb)
        else:
            parsed = module.parse(tracked)
    except Exception as exc:  # noqa: BLE001 - a broken input must never stop the run
        parsed = ParsedSource(
            source=source,
            events=(),
            warnings=(parser_stopped(source.kind.value, exc),),
        )
    if source.kind is SourceKind.ENV_REPORT:
        parsed = _with_log_regions(parsed, tracked, kb)
    if parsed.source.kind in (SourceKind.RANK_LOG, SourceKind.TEXT):
        parsed = _with_pyspy_regions(parsed, tracked)
    known = {*source.warnings, *parsed.warnings}
    ended = [p for p in dict.fromkeys(map(stream_problem, opened)) if p and p not in known]
    # the kind a parser settled on (a report at the top of a log is a log)
    read_as = dataclasses.replace(source, kind=parsed.source.kind)
    return dataclasses.replace(parsed, source=read_as, warnings=(*parsed.warnings, *ended))


def _with_log_regions(report: ParsedSource, source: Source, kb: Knowledge | None) -> ParsedSource:
    """An environment or op report at the top of a log does not make the rest of it a report:
    the file is read as a log too, and when that finds more than routine lines (a traceback,
    a launcher's exit, training progress) it is a log that also holds a report."""
    from triage import knowledge
    from triage.model import EventKind
    from triage.parsers import rank_log

    try:
        as_log = rank_log.parse(dataclasses.replace(source, kind=SourceKind.RANK_LOG), kb=kb)
    except Exception:  # noqa: BLE001 - the report's own reading still stands
        return report
    routine = (kb if kb is not None else knowledge.shipped()).routine
    found = [
        ev
        for ev in as_log.events
        if ev.kind is not EventKind.INPUT_WARNING and routine.which(ev.text) is None
    ]
    if not found:
        return report
    return dataclasses.replace(
        as_log,
        source=dataclasses.replace(source, kind=SourceKind.RANK_LOG),
        events=(*report.events, *as_log.events),
        warnings=tuple(dict.fromkeys((*report.warnings, *as_log.warnings))),
    )


# Notes up to this size, and logs up to the smaller one, are looked through for py-spy dumps
# among their lines: a big rank log is read once, by its own parser (reading every file of a
# 64-rank job twice would double the cost of a run), and py-spy output pasted into a log is a
# diary's or an issue's, not a training process's.
PYSPY_IN_TEXT_BYTES = 8 << 20
PYSPY_IN_LOG_BYTES = 1 << 20
_PYSPY_THREAD = re.compile(rb"^\s*Thread 0x[0-9A-Fa-f]+ \((?:idle|active|active\+gil|gil)\)", re.M)


def _with_pyspy_regions(parsed: ParsedSource, source: Source) -> ParsedSource:
    """py-spy dumps inside a log or a Markdown note (fences, `<details>`) are read as dumps
    too: a stack pasted into a training diary is the same evidence as a dump file."""
    limit = PYSPY_IN_TEXT_BYTES if parsed.source.kind is SourceKind.TEXT else PYSPY_IN_LOG_BYTES
    if source.size > limit:
        return parsed
    try:
        with source.open() as stream:
            data = stream.read(PYSPY_IN_TEXT_BYTES)
    except Exception:  # noqa: BLE001 - what the log parser read still stands
        return parsed
    if b"Thread 0x" not in data or _PYSPY_THREAD.search(data) is None:
        return parsed
    from triage.parsers import pyspy

    try:
        stacks = pyspy.stacks_in_text(source, data.decode("utf-8", errors="replace"))
    except Exception:  # noqa: BLE001
        return parsed
    if not stacks:
        return parsed
    return dataclasses.replace(parsed, events=(*parsed.events, *stacks))


def preload(kinds: Iterable[SourceKind] | None = None, kb: Knowledge | None = None) -> None:
    """Load what parsing big files of these kinds needs (None: logs and flight-recorder dumps)
    in this process: worker processes forked afterwards inherit it instead of each loading it
    again. The log parser (the scan tables it derives from `kb`, numpy, the compiled marker
    scans: ~0.6 s) is loaded only for kinds it reads; a job of dumps alone never needs it."""
    kinds = set(_MODULES) if kinds is None else set(kinds)
    if SourceKind.FLIGHT_RECORDER in kinds:
        from triage.parsers import flight_recorder  # noqa: F401 - loaded for the fork
    if not kinds & {k for k, name in _MODULES.items() if name == "rank_log"}:
        return
    from triage.parsers import rank_log
    from triage.scan import engines

    # every big chunk's line index; hyperscan scans do not import numpy themselves
    engines.numpy_module()
    rank_log.scan_tables(kb).warm()


def parse_text(
    text: str,
    name: str = "<pasted>",
    kind: SourceKind = SourceKind.TEXT,
    kb: Knowledge | None = None,
) -> ParsedSource:
    """Parse pasted text (an issue body, a traceback) as a log, or as `kind` when the caller
    sniffed it (a py-spy dump or `collect_env` output pasted into an issue)."""
    data = text.encode("utf-8", errors="replace")
    source = Source(path=name, kind=kind, size=len(data), open=lambda: io.BytesIO(data))
    parsed = parse(source, kb=kb)
    return dataclasses.replace(parsed, paste=text) if 0 < len(data) <= MAX_PASTE else parsed
