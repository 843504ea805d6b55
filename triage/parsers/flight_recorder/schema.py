"""A decoded dump's top level, era by era: version, pg_config, pg_status, the entries list.

Which era a dump is from is told by the fields present, never by the version string
(formats.md §4.6).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from triage.model import EntryTable, FlightRecorderDump, FlightRecorderEntry
from triage.parsers.flight_recorder.columns import entries_by_column
from triage.parsers.flight_recorder.entries import BadEntry, entry_of, fits

__all__ = ["MAX_ENTRIES", "build"]

# Default TORCH_FR_BUFFER_SIZE is 2,000; users raise it to tens of thousands at most.
MAX_ENTRIES = 1_000_000
_RANKS_TEXT = re.compile(r"\s*\[\s*(?:-?\d+\s*(?:,\s*-?\d+\s*)*,?)?\s*\]\s*")


def build(
    raw: Any, rank: int | None, warnings: list[str], first_index: int = 0
) -> FlightRecorderDump:
    """`first_index`: the place of the first entry given among all the dump held (a dump read
    in part); entries without a record id are numbered by their place."""
    if isinstance(raw, list):
        version = None  # torch <= 2.2 wrote the entries alone
        top: Mapping[str, Any] = {}
        raw_entries: Any = raw
    elif isinstance(raw, dict):
        top = raw
        version_value = raw.get("version")
        version = None
        if type(version_value) is int and not fits(version_value):
            warnings.append("version is an integer wider than 64 bytes; ignored")
        elif type(version_value) in (str, int, float):
            version = str(version_value)[:32]
        elif version_value is not None:  # a container may nest without end: never printed
            warnings.append(f"version is a {type(version_value).__name__}, not a string; ignored")
        raw_entries = raw.get("entries", [])
        if not isinstance(raw_entries, list):
            warnings.append(f"'entries' is a {type(raw_entries).__name__}, not a list; ignored")
            raw_entries = []
        if "entries" not in raw:
            warnings.append("flight-recorder dump has no 'entries' key")
    else:
        raise TypeError(f"top level is a {type(raw).__name__}, not a dict or list")

    if len(raw_entries) > MAX_ENTRIES:
        warnings.append(
            f"flight-recorder dump holds {len(raw_entries)} entries; only the last "
            f"{MAX_ENTRIES} were read"
        )
        raw_entries = raw_entries[-MAX_ENTRIES:]

    entries, skipped, reasons = _entries(raw_entries, first_index)
    if skipped:
        why = "; ".join(f"{reason} ({count}x)" for reason, count in reasons.items())
        warnings.append(
            f"skipped {skipped} of {len(raw_entries)} flight-recorder entries with bad fields: "
            f"{why}"
        )

    pg_config, pg_desc = _pg_config(top.get("pg_config"), warnings)
    # entries carry the true (name, desc); gloo's pg_config does not
    groups = entries.distinct("pg_name", "pg_desc")
    _repair_gloo_pg_config(pg_config, {name for name, _ in groups})
    for name, desc in groups:
        if name and desc and name not in pg_desc:
            pg_desc[name] = desc

    comm = top.get("comm_lib_version", top.get("nccl_version"))
    return FlightRecorderDump(
        rank=rank,
        version=version,
        pg_config=pg_config,
        pg_desc=pg_desc,
        pg_status=_pg_status(top.get("pg_status"), warnings),
        comm_lib_version=comm if isinstance(comm, str) and comm else None,
        entries=entries,
    )


def _pg_config(raw: Any, warnings: list[str]) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    config: dict[str, tuple[int, ...]] = {}
    desc: dict[str, str] = {}
    if raw is None:
        return config, desc
    if not isinstance(raw, dict):
        warnings.append(f"pg_config is a {type(raw).__name__}, not a dict; ignored")
        return config, desc
    bad = 0
    for key, info in raw.items():
        if not isinstance(key, str) or not isinstance(info, dict):
            bad += 1
            continue
        name = info.get("name", key)
        name = name if isinstance(name, str) and name else key
        ranks = _ranks(info.get("ranks"))
        if ranks is None:
            bad += 1
        else:
            config[name] = ranks
        pg_text = info.get("desc")
        if isinstance(pg_text, str) and pg_text:
            desc[name] = pg_text
    if bad:
        warnings.append(f"{bad} pg_config entries unreadable; their membership is unknown")
    return config, desc


def _ranks(value: Any) -> tuple[int, ...] | None:
    """`'[0, 1]'` (the usual string form) or a real list -> tuple of ranks."""
    if isinstance(value, str):
        return _ranks_text(value) if len(value) <= 10_000_000 else None
    if isinstance(value, (list, tuple)) and all(type(r) is int and fits(r) for r in value):
        return tuple(value)
    return None


@lru_cache(maxsize=256)
def _ranks_text(value: str) -> tuple[int, ...] | None:
    # Every rank's dump repeats the same groups: each text is read once per process. The
    # shape check comes first, so only a flat list of integers reaches the (C) JSON reader.
    if not _RANKS_TEXT.fullmatch(value):
        return None
    inner = value.strip()[1:-1].rstrip().rstrip(",")  # JSON has no trailing comma
    try:
        ranks = tuple(json.loads(f"[{inner}]"))
    except (ValueError, RecursionError):
        return None
    return ranks if all(map(fits, ranks)) else None


def _repair_gloo_pg_config(config: dict[str, tuple[int, ...]], names: set[str]) -> None:
    # gloo dumps name their only pg_config key '' (formats.md §4.7 caveat 2). With a single
    # process group in the entries, that membership belongs to it.
    if "" not in config:
        return
    members = config.pop("")
    if len(names) == 1 and members:
        name = names.pop()
        config.setdefault(name, members)


def _pg_status(raw: Any, warnings: list[str]) -> dict[str, dict[str, int]]:
    status: dict[str, dict[str, int]] = {}
    if raw is None:
        return status
    if not isinstance(raw, dict):
        warnings.append(f"pg_status is a {type(raw).__name__}, not a dict; ignored")
        return status
    wide = 0
    for key, fields in raw.items():
        if not isinstance(fields, dict):
            continue
        values: dict[str, int] = {}
        for field, value in fields.items():
            if type(value) is int and not fits(value):
                wide += 1
                continue
            number = _int_or_text(value)  # JSON dumps write these as strings
            if isinstance(field, str) and number is not None:
                values[field] = number
        status[str(key)] = values
    if wide:
        warnings.append(f"{wide} pg_status values are integers wider than 64 bytes; ignored")
    return status


def _int_or_text(value: Any) -> int | None:
    if type(value) is int:
        return value
    if isinstance(value, str) and len(value) < 24:
        try:
            return int(value)
        except ValueError:
            return None
    return None


# --------------------------------------------------------------------------- entries


def _entries(
    raw_entries: list[Any], first_index: int = 0
) -> tuple[EntryTable, int, dict[str, int]]:
    # Caches share identical shapes, dtypes and stacks between entries: a 2,000-entry dump of
    # one training loop repeats the same handful, and sharing keeps 1,024-rank jobs small.
    cache: dict[Any, Any] = {}
    try:
        fast = entries_by_column(raw_entries, cache, first_index)
    except (TypeError, ValueError):  # odd data the column checks did not foresee
        fast = None
    if fast is not None:
        return fast, 0, {}
    cache.clear()
    entries: list[FlightRecorderEntry] = []
    reasons: dict[str, int] = {}
    for index, raw in enumerate(raw_entries):
        try:
            if type(raw) is not dict:
                raise BadEntry("entry is not a dict")
            entries.append(entry_of(raw, first_index + index, cache))
        except BadEntry as bad:
            reason = str(bad)
            reasons[reason] = reasons.get(reason, 0) + 1
    return EntryTable.of(entries), sum(reasons.values()), reasons
