"""Flight-recorder (FR) dumps: one rank's ring buffer of collectives, as pickle or JSON.

Every schema era is read by looking at which fields are present, never at the version string
(formats.md §4.6):

* torch <= 2.2: a bare list of entries, each with one `seq_id`;
* "1.x": a dict with `version` and `entries`, still `seq_id`, no process-group info;
* "2.0"-"2.10": `collective_seq_id`/`p2p_seq_id`, `process_group` (tuple in pickle, list in
  JSON), `pg_config` whose `ranks` is a *string* such as `'[0, 1]'`, `pg_status` (ints in
  pickle, strings in JSON), `nccl_version` later renamed `comm_lib_version`, optional `frames`,
  `thread_id`/`thread_name` and `duration_ms`.

Pickles are untrusted and go through `safe_pickle`. Entries with a field of the wrong type are
skipped and counted in one warning; a dump that cannot be read at all becomes an
INPUT_WARNING event. The parser never raises.

Big jobs: with `tail=N` only the dump's header (version, pg_config, pg_status) and its last
N entries are decoded. Even the C unpickler needs ~15 ms for a 2,000-entry dump, so 1,024
of them cannot be read whole in seconds; a hang is decided at the end of the ring buffers,
which is what the last entries hold. The cut works on the protocol-2 layout torch writes and
on Python's at protocols 2-5 (`tail`); JSON, and a protocol 4-5 dump whose last entries name
an object first written after its beginning, are read whole.

This module is the gate (size limits, the job's memory and entry budgets) and the event it
makes; the package's other modules each do one step:

* `safe_pickle`: the opcode scan and the restricted unpickler; `pickle_memo`: the memo
  search a piece cut from a pickle needs;
* `decode`: bytes -> raw data, whole or its tail (`tail`); in a contained process
  (`contain_decoding`) a whole pickle is loaded before it is scanned, and scanned only when
  the load fails or the dump's data is not what a dump holds;
* `schema`: the raw top level, era by era -> FlightRecorderDump;
* `columns`: all entries of a well-formed dump at once, and the columnar codec the worker
  pool uses; `entries`: entry by entry, for dumps the column path refuses.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from triage import budget
from triage.model import (
    EntryTable,
    Event,
    EventKind,
    FlightRecorderDump,
    Level,
    ParsedSource,
    Source,
)
from triage.parsers.common import input_warning
from triage.parsers.flight_recorder import safe_pickle
from triage.parsers.flight_recorder.columns import entries_from_columns, entry_columns
from triage.parsers.flight_recorder.decode import (
    MOST_PER_BYTE,
    contain_decoding,
    format_of,
    load_dump,
)
from triage.parsers.flight_recorder.schema import MAX_ENTRIES

__all__ = [
    "MAX_ENTRIES",
    "contain_decoding",
    "decode_estimate",
    "entries_from_columns",
    "entry_columns",
    "count_entries_in_parent",
    "load_dump",
    "not_read",
    "parse",
    "within_entry_budget",
]

# False in a child process that decodes dumps for its parent (`triage.isolated`): the parent
# counts the entries it receives against the job's budget (`within_entry_budget`), as the
# child's counts may not outlive it.
_COUNT_ENTRIES_HERE = True


def count_entries_in_parent() -> None:
    """In a decoding child: leave the job's entry budget to the parent that reads the results."""
    global _COUNT_ENTRIES_HERE
    _COUNT_ENTRIES_HERE = False


def parse(source: Source, *, tail: int | None = None) -> ParsedSource:
    """Parse one flight-recorder dump into a FLIGHT_RECORDER event (or a warning event).

    `tail`: read only the last `tail` entries of a bigger dump (see the module docstring).
    """
    warnings: list[str] = []
    job = budget.current()
    limit = min(safe_pickle.DEFAULT_LIMITS.max_bytes, job.limits.fr_decode_bytes)
    if source.size > limit:
        return _failed(
            source, f"flight-recorder dump is over the {_mib(limit)} limit; not read", warnings, 0
        )
    data = b""
    try:
        with source.open() as stream:
            # a size known: no buffer of the limit's size (256 MiB) to map and give back
            want = limit + 1 if source.size <= 0 else min(limit, source.size) + 1
            data = stream.read(want)
            if len(data) == want and want <= limit:  # grew since it was listed
                data += stream.read(limit + 1 - want)
    except Exception as exc:  # unreadable archive member, permission, vanished file
        return _failed(source, f"cannot read flight-recorder dump: {exc}", warnings, 0)
    if len(data) > limit:
        return _failed(
            source, f"flight-recorder dump is over the {_mib(limit)} limit; not read", warnings, 0
        )
    # What decoding it whole may take, held against the job's budget while it decodes: a
    # 256 MB dump of `{}` entries would take ~7 GB, and several workers decode at once.
    estimate = _bound_estimate(len(data), job.limits.fr_decode_bytes) or decode_estimate(data)
    with job.decoding(estimate) as fits:
        if fits:
            dump, problem = load_dump(data, rank=source.rank, warnings=warnings, tail=tail)
        else:
            why = (
                f"decoding this dump whole would take about {_mib(estimate)} of memory, over "
                f"this job's budget of {_mib(job.limits.fr_decode_bytes)}"
            )
            dump, problem = load_dump(
                data, rank=source.rank, warnings=warnings, tail=tail or _TAIL_WHEN_BIG, whole=False
            )
            if dump is None:
                return _failed(source, f"{why}; not read", warnings, len(data))
            warnings.append(f"{why}: only its last entries were read")
    if dump is None:
        return _failed(source, problem or "flight-recorder dump is empty", warnings, len(data))
    if _COUNT_ENTRIES_HERE:
        dump = _within_entry_budget(dump, job, warnings)
    event = _event(source, dump, format_of(data))
    return ParsedSource(
        source=source, events=(event,), warnings=tuple(warnings), bytes_read=len(data)
    )


def within_entry_budget(parsed: ParsedSource) -> ParsedSource:
    """`parsed` (from a child that left the entry budget to this process) with its dump's
    entries counted against this job's budget, and cut to what the budget still allows."""
    job = budget.current()
    events = list(parsed.events)
    warnings = list(parsed.warnings)
    for n, event in enumerate(events):
        if isinstance(event.payload, FlightRecorderDump):
            dump = _within_entry_budget(event.payload, job, warnings)
            if dump is not event.payload:
                events[n] = _event(parsed.source, dump, event.attrs["format"])
    return replace(parsed, events=tuple(events), warnings=tuple(warnings))


def _event(source: Source, dump: FlightRecorderDump, fmt: str) -> Event:
    return Event(
        source=source.path,
        kind=EventKind.FLIGHT_RECORDER,
        text=_summary(dump),
        rank=source.rank,
        local_rank=source.local_rank,
        host=source.host,
        time=_last_time(dump),
        level=Level.INFO,
        attrs=_attrs(dump, fmt),
        payload=dump,
    )


_TAIL_WHEN_BIG = 128  # entries read of a dump too big to decode whole (pipeline.FR_TAIL_ENTRIES)


def _bound_estimate(size: int, budget: int) -> int | None:
    """An upper estimate from the size alone, where it is a small share of the budget (a
    1,024-rank job's 330 KB dumps: 29 MB each of 1 GiB): counting opcodes (8 passes, ~1.2 ms
    a dump, as long as the tail read itself) would only lower a hold that fits anyway. None:
    count them (`decode_estimate`)."""
    bound = size * MOST_PER_BYTE
    return bound if bound <= budget // 16 else None


def decode_estimate(data: bytes) -> int:
    """About how many bytes of memory decoding `data` whole takes, from its bytes alone (an
    upper estimate: every byte that can open a container or a string is counted as one)."""
    if format_of(data) == "json":
        containers = data.count(b"{") + data.count(b"[")
        strings = data.count(b'"') // 2
    else:
        containers = sum(data.count(op) for op in (b"]", b"}", b"(", b"\x85", b"\x86", b"\x87"))
        strings = data.count(b"X") + data.count(b"\x8c")
    # an empty dict or list is 56-64 bytes and a slot in its parent; a short str ~50 bytes
    return len(data) * 8 + containers * 80 + strings * 60


def _within_entry_budget(
    dump: FlightRecorderDump, job: budget.JobBudget, warnings: list[str]
) -> FlightRecorderDump:
    """The dump with only as many of its last entries as the job's budget still allows."""
    held = len(dump.entries)
    granted = job.take_fr_entries(held)
    if granted >= held:
        return dump
    warnings.append(
        f"this job's budget of {job.limits.fr_entries:,} flight-recorder entries is used up: "
        f"only the last {granted} of this dump's {held} entries were kept"
    )
    kept = dump.entries[held - granted :] if granted else ()
    return replace(dump, entries=kept, entries_total=dump.entries_total or held)


def _mib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


# --------------------------------------------------------------------------- summary


def _summary(dump: FlightRecorderDump) -> str:
    """One line a person (and a regex rule) can read, e.g.
    `FR dump v2.10, 12 entries, pgs 0:default_pg, last seq 12 all_reduce (completed)`."""
    version = f"v{dump.version}" if dump.version else "(pre-2.3 list)"
    held = f"{len(dump.entries)} entries"
    if dump.entries_total is not None:
        held = f"{dump.entries_total} entries (last {len(dump.entries)} read)"
    parts = [f"FR dump {version}", held]
    recent = EntryTable.of(dump.entries)[-256:].field("pg_name")  # no entry built for this
    names = list(dict.fromkeys([*dump.pg_config, *recent]))
    names = [n for n in names if n]
    if names:
        shown = [f"{n}:{dump.pg_desc[n]}" if dump.pg_desc.get(n) else n for n in names[:6]]
        more = f" +{len(names) - 6} more" if len(names) > 6 else ""
        parts.append("pgs " + " ".join(shown) + more)
    if dump.comm_lib_version:
        parts.append(f"comm lib {dump.comm_lib_version}")
    if dump.entries:
        last = dump.entries[-1]
        seq = last.p2p_seq_id if last.is_p2p else last.collective_seq_id
        kind = "p2p seq" if last.is_p2p else "seq"
        parts.append(f"last {kind} {seq} {last.profiling_name} ({last.state})")
    return ", ".join(parts)


def _attrs(dump: FlightRecorderDump, fmt: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "format": fmt,
        "version": dump.version,
        "entries": len(dump.entries),
        "entries_total": dump.entries_total or len(dump.entries),
        "comm_lib_version": dump.comm_lib_version,
    }
    if dump.entries:
        last = dump.entries[-1]
        attrs.update(
            last_seq=last.collective_seq_id,
            last_op=last.op,
            last_state=last.state,
            last_pg=last.pg_name,
            backend=last.backend,
        )
    return attrs


def _last_time(dump: FlightRecorderDump) -> float | None:
    for entry in reversed(dump.entries):
        if entry.time_created_ns:
            return entry.time_created_ns / 1e9
    return None


def not_read(source: Source, why: str) -> ParsedSource:
    """A dump that could not be read at all: `why` as its warning and event."""
    return _failed(source, why, [], 0)


def _failed(source: Source, why: str, warnings: list[str], size: int) -> ParsedSource:
    warnings.append(why)
    event = input_warning(source, why, "flight_recorder")
    return ParsedSource(source=source, events=(event,), warnings=tuple(warnings), bytes_read=size)
