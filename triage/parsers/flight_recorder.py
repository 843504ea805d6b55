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
which is what the last entries hold. The cut works on the protocol-2 layout torch writes
(`_read_tail`); any other layout is read whole.
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache, partial
from itertools import repeat
from typing import Any

from triage import budget
from triage.model import (
    Event,
    EventKind,
    FlightRecorderDump,
    FlightRecorderEntry,
    Level,
    ParsedSource,
    Source,
    StackFrame,
)
from triage.parsers import safe_pickle
from triage.parsers.common import input_warning

__all__ = ["MAX_ENTRIES", "entries_from_columns", "entry_columns", "load_dump", "parse"]

# Default TORCH_FR_BUFFER_SIZE is 2,000; users raise it to tens of thousands at most.
MAX_ENTRIES = 1_000_000
_MAX_FRAMES = 256  # per entry; deeper stacks are cut (the innermost frames matter most)
_RANKS_TEXT = re.compile(r"\s*\[\s*(?:-?\d+\s*(?:,\s*-?\d+\s*)*,?)?\s*\]\s*")
_P2P_OPS = frozenset({"send", "recv", "isend", "irecv"})
_STATES = {s: s for s in ("scheduled", "started", "completed")}  # also interns them
# Sequence ids, record ids and timeouts repeat on every rank (all ranks number the same
# collectives): one object per value, shared by all dumps of the process, saves ~100 bytes
# an entry at 1,024 ranks. Cleared when it grows past the bound, never unbounded.
_SHARED_INTS: dict[int | None, int | None] = {}
_SHARED_FLOATS: dict[float | None, float | None] = {}
_SHARED_MAX = 1 << 20
_ENTRY_FIELDS = FlightRecorderEntry._fields
_INT_FIELDS = tuple(
    i
    for i, name in enumerate(_ENTRY_FIELDS)
    if name in ("record_id", "collective_seq_id", "p2p_seq_id", "op_id", "timeout_ms")
)
_FLOAT_FIELDS = (_ENTRY_FIELDS.index("duration_ms"),)
# Entries and frames are NamedTuples: `tuple.__new__` fills one from a row at C speed,
# skipping the generated keyword-argument `__new__` (rows here always have every field).
_new_entry = partial(tuple.__new__, FlightRecorderEntry)
_new_frame = partial(tuple.__new__, StackFrame)


class _BadEntry(Exception):
    """An entry field has the wrong type; the entry is skipped."""


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
    dump = _within_entry_budget(dump, job, warnings)
    event = Event(
        source=source.path,
        kind=EventKind.FLIGHT_RECORDER,
        text=_summary(dump),
        rank=source.rank,
        local_rank=source.local_rank,
        host=source.host,
        time=_last_time(dump),
        level=Level.INFO,
        attrs=_attrs(dump, data),
        payload=dump,
    )
    return ParsedSource(
        source=source, events=(event,), warnings=tuple(warnings), bytes_read=len(data)
    )


_TAIL_WHEN_BIG = 128  # entries read of a dump too big to decode whole (pipeline.FR_TAIL_ENTRIES)


# Most a byte of a dump can cost decoded: its own 8 and one container (80) or string (60).
_MOST_PER_BYTE = 88


def _bound_estimate(size: int, budget: int) -> int | None:
    """An upper estimate from the size alone, where it is a small share of the budget (a
    1,024-rank job's 330 KB dumps: 29 MB each of 1 GiB): counting opcodes (8 passes, ~1.2 ms
    a dump, as long as the tail read itself) would only lower a hold that fits anyway. None:
    count them (`decode_estimate`)."""
    bound = size * _MOST_PER_BYTE
    return bound if bound <= budget // 16 else None


def decode_estimate(data: bytes) -> int:
    """About how many bytes of memory decoding `data` whole takes, from its bytes alone (an
    upper estimate: every byte that can open a container or a string is counted as one)."""
    if _format_of(data) == "json":
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


def load_dump(
    data: bytes,
    *,
    rank: int | None = None,
    warnings: list[str] | None = None,
    tail: int | None = None,
    whole: bool = True,
) -> tuple[FlightRecorderDump | None, str | None]:
    """Decode pickle or JSON bytes into a FlightRecorderDump.

    With `tail`, a pickle holding more entries than that gives only its last `tail` entries
    (`entries_total` says how many it holds). Returns (dump, None) or (None, why-not).
    Non-fatal problems are appended to `warnings`. `whole=False`: never decode the whole
    dump (it would not fit in memory); a dump the tail read cannot cut is not read.
    """
    if warnings is None:
        warnings = []
    if not data.strip():
        return None, "flight-recorder dump is empty (0 bytes of data)"
    with _gc_paused():
        if tail is not None and _format_of(data) == "pickle":
            try:
                cut = _read_tail(data, max(tail, 1))
            except Exception:  # noqa: BLE001 - a layout no guard foresaw: read whole below
                cut = None
            if cut is not None:
                raw, total = cut
                try:
                    # a dump without record ids numbers entries by place: the kept ones are
                    # the last of `total`
                    dump = _build(raw, rank, warnings, first_index=total - len(raw["entries"]))
                except Exception:  # noqa: BLE001 - read whole below, which says what is wrong
                    dump = None
                if dump is not None:
                    return replace(dump, entries_total=total), None
        if not whole:
            return None, "its last entries could not be cut out of it"
        return _decode(data, rank, warnings, tail)


@contextmanager
def _gc_paused() -> Iterator[None]:
    # A dump is ~20k freshly allocated containers, none of them in a cycle; letting the cyclic
    # GC run meanwhile re-scans every dump already loaded (30-40% of the time at 1,024 ranks).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _decode(
    data: bytes, rank: int | None, warnings: list[str], tail: int | None = None
) -> tuple[FlightRecorderDump | None, str | None]:
    """Decode the whole dump; with `tail`, build only its last `tail` entries (a layout the
    tail read cannot cut, JSON or Python's protocols 4-5, still costs the big job only the
    decoding: the same entries and the same memory as a cut)."""
    try:
        if _format_of(data) == "json":
            raw: Any = json.loads(data)
        else:
            # No nesting walk: _build reads known fields at known depths and never recurses.
            raw = safe_pickle.loads(data, check_depth=False)
    except safe_pickle.PickleRefused as exc:
        return None, f"flight-recorder pickle refused: {exc}"
    except safe_pickle.PickleError as exc:
        return None, f"flight-recorder dump is truncated or corrupt ({len(data)} bytes): {exc}"
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        return None, f"flight-recorder JSON is truncated or corrupt ({len(data)} bytes): {exc}"
    except Exception as exc:  # the promise is "never raises"
        return None, f"flight-recorder dump unreadable: {type(exc).__name__}: {exc}"
    total = None
    if tail is not None:
        entries = raw.get("entries") if isinstance(raw, dict) else raw
        if type(entries) is list and len(entries) > max(tail, 1):
            total = len(entries)
            kept = entries[-max(tail, 1) :]
            raw = {**raw, "entries": kept} if isinstance(raw, dict) else kept
    try:
        first = 0 if total is None else total - max(tail or 1, 1)
        dump = _build(raw, rank, warnings, first_index=first)
        return (dump if total is None else replace(dump, entries_total=total)), None
    except Exception as exc:  # a shape no era had; say so rather than crash the run
        return None, f"flight-recorder dump has an unknown layout: {type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------- tail read

# The top-level `'entries'` key and the list it opens: BINUNICODE and its memo PUT, then
# EMPTY_LIST and MARK, with a PUT between them where Python's pickler wrote it (torch's C++
# pickler memoizes no list that nothing else holds). The first entry follows.
_PUT = rb"(?:q.|r.{4})"
_ENTRIES_KEY = re.compile(
    rb"X\x07\x00\x00\x00entries" + _PUT + rb"\](" + _PUT + rb")?\(", re.DOTALL
)
# An entry opens as EMPTY_DICT, MARK and its first key, with a PUT after EMPTY_DICT where
# Python's pickler wrote it (torch's: none, an entry dict is held by nothing else). In the
# first entry that key is spelled out (BINUNICODE + PUT), later entries name it by memo slot.
_FIRST_ENTRY = re.compile(rb"\}(" + _PUT + rb")?\(X(.{4})", re.DOTALL)
_EMPTY_DICT, _BINPUT, _LONG_BINPUT = ord("}"), ord("q"), ord("r")
# What replaces the cut-off head: a dict with one key whose list the kept entries fill; the
# pickle's own closing opcodes (APPENDS, SETITEMS, STOP; torch adds the top dict's PUT) then
# end both.
_PIECE_HEAD = b"}(X\x01\x00\x00\x00_]("


# Entries loaded whole at the start of a dump read in part: their memo holds what the kept
# entries at the end mostly refer to (the keys, the op and group names, the stacks of the
# training loop), so those need no search.
_PREFIX_ENTRIES = 8
# A kept entry may still name an object first written after those (a stack first seen
# later): each such slot is looked for by itself this many times, then all a piece may name
# at once (`_read_piece`).
_MISSES_ONE_BY_ONE = 4


def _read_tail(data: bytes, keep: int) -> tuple[dict[str, Any], int] | None:
    """(the top-level dict with only the last `keep` entries, entries the dump holds), or
    None when the dump holds no more than `keep` entries or is not laid out as torch's
    pickler (or Python's, at protocol 2 or 3) writes it: the caller then reads it whole, so
    a wrong guess here costs time, never an answer.

    Two parts are loaded, each as a pickle of its own through the same safety scan: the
    beginning (the header and the first entries, closed by APPENDS and SETITEMS) and the piece
    from the first kept entry to the end. The piece's references to objects defined before
    it (strings, and in torch's layout the frame dicts entries share) come from the memo the
    beginning's load left, and those defined between the two from
    `safe_pickle.memo_definitions`, for exactly the slots the piece turns out to need.
    """
    key = _ENTRIES_KEY.search(data)
    if key is None:
        return None
    first = _FIRST_ENTRY.match(data, key.end())
    if first is None:
        return None
    memoized = first[1] is not None  # Python's layout: every entry dict has its PUT
    key_end = first.end() + int.from_bytes(first[2], "little")
    slot = _put_slot(data, key_end)
    if slot is None:
        return None
    get = b"h" + bytes((slot,)) if slot < 256 else b"j" + slot.to_bytes(4, "little")
    # Counted by the bytes every later entry opens with: a payload byte run that mimics them
    # (MARK, BINGET of an unprintable slot) would only miscount entries_total.
    total = 1 + data.count((b"(" if memoized else b"}(") + get, key_end)
    if total <= keep:
        return None
    cut = _kth_start_from_end(data, b"(" + get, keep, key_end, memoized)
    if cut is None:
        return None
    # Slots from the first kept entry's own PUT on are defined inside the piece. torch's
    # layout gives a kept entry no PUT of its own: every slot the piece names is looked for
    # before the cut, and the first one not found there ends the search (slots are numbered
    # in the order they are written).
    first_new = _put_slot(data, cut + 1) if memoized else 1 << 32
    if first_new is None:
        return None
    begin = _kth_start_from_start(data, b"(" + get, _PREFIX_ENTRIES, key_end, cut, memoized)
    try:
        # APPENDS closes the entries list, SETITEMS the top dict; a forbidden opcode or a
        # memo bomb in either part is refused by its scan before anything is built
        head, known = safe_pickle.loads_prefix(data[:begin] + b"eu.")
        rest = _read_piece(data, cut, first_new, known)
    except safe_pickle.PickleError:
        return None
    if type(head) is not dict or type(rest) is not dict or type(rest.get("_")) is not list:
        return None
    head.pop("entries", None)  # the first entries: only their memo was wanted
    entries = rest.pop("_")
    if len(entries) != keep or "entries" in rest:
        return None
    return {**head, **rest, "entries": entries}, total


def _read_piece(data: bytes, cut: int, first_new: int, known: safe_pickle.Memo) -> Any:
    """The dict `_PIECE_HEAD` + data[cut:] makes, its references to slots defined before
    the cut taken from `known` or looked for (bounded: see `safe_pickle.memo_definitions`)."""
    piece = _PIECE_HEAD + data[cut:]
    defined: dict[int, tuple[int, bytes]] = {}  # slot -> (where, opcodes), from the searches

    def load() -> Any:
        ordered = sorted(defined.items(), key=lambda kv: kv[1][0])
        return safe_pickle.loads_piece(
            piece, {}, len(data), definitions=[(s, raw) for s, (_, raw) in ordered], known=known
        )

    for _ in range(_MISSES_ONE_BY_ONE):
        try:
            return load()
        except safe_pickle.MemoMissing as missing:
            if missing.slot >= first_new or missing.slot in defined:
                raise
            found = safe_pickle.memo_definitions(data, {missing.slot}, cut, located=True)
            if not any(s == missing.slot for s, _, _ in found):
                raise
            defined.update((s, (at, raw)) for s, at, raw in found)
    # Many objects first written after the beginning: every slot the piece may name (a
    # superset: payload bytes that look like a GET count too), searched for in one go.
    wanted = {s for s in safe_pickle.memo_gets(piece) if s < first_new} - defined.keys()
    found = safe_pickle.memo_definitions(data, wanted, cut, located=True)
    defined.update((s, (at, raw)) for s, at, raw in found)
    return load()


def _kth_start_from_start(
    data: bytes, tail: bytes, k: int, lowest: int, highest: int, memoized: bool
) -> int:
    """Start of the k-th entry after the first (the end of the first k+1 entries' bytes) or
    `highest`: found forwards by the bytes later entries open with, checked as
    `_kth_start_from_end` checks them."""
    at = lowest
    while k > 0:
        at = data.find(tail, at + 1, highest)
        if at < 0:
            return highest
        if not memoized:
            if data[at - 1] == _EMPTY_DICT:
                k -= 1
                if k == 0:
                    return at - 1
        elif data[at - 2] == _BINPUT and data[at - 3] == _EMPTY_DICT:
            k -= 1
            if k == 0:
                return at - 3
        elif data[at - 5] == _LONG_BINPUT and data[at - 6] == _EMPTY_DICT:
            k -= 1
            if k == 0:
                return at - 6
    return highest


def _kth_start_from_end(
    data: bytes, tail: bytes, k: int, lowest: int, memoized: bool = True
) -> int | None:
    """Start of the k-th entry from the end: found backwards (the kept entries are a small
    part of the dump) by the bytes every entry opening ends with (MARK, the first key's GET),
    each hit checked for the EMPTY_DICT (and, in Python's layout, BINPUT / LONG_BINPUT)
    before them."""
    at = len(data)
    while k > 0:
        at = data.rfind(tail, lowest, at)
        if at < 0:
            return None
        if not memoized:
            if at >= 1 and data[at - 1] == _EMPTY_DICT:
                at -= 1
                k -= 1
        elif at >= 3 and data[at - 2] == _BINPUT and data[at - 3] == _EMPTY_DICT:
            at -= 3
            k -= 1
        elif at >= 6 and data[at - 5] == _LONG_BINPUT and data[at - 6] == _EMPTY_DICT:
            at -= 6
            k -= 1
    return at


def _put_slot(data: bytes, at: int) -> int | None:
    """The memo slot of the BINPUT / LONG_BINPUT at `at`, or None if there is none."""
    code = data[at : at + 1]
    if code == b"q":
        return data[at + 1] if at + 1 < len(data) else None
    if code == b"r" and at + 5 <= len(data):
        return int.from_bytes(data[at + 1 : at + 5], "little")
    return None


# --------------------------------------------------------------------------- structure


def _format_of(data: bytes) -> str:
    """Sniff by content (formats.md §4.5): pickles start with PROTO 0x80, JSON with { or [."""
    return "json" if data.lstrip()[:1] in (b"{", b"[") else "pickle"


def _build(
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
        version = None if version_value is None else str(version_value)[:32]
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
    _repair_gloo_pg_config(pg_config, entries)
    for entry in entries:  # entries carry the true (name, desc); gloo's pg_config does not
        if entry.pg_name and entry.pg_desc and entry.pg_name not in pg_desc:
            pg_desc[entry.pg_name] = entry.pg_desc

    comm = top.get("comm_lib_version", top.get("nccl_version"))
    return FlightRecorderDump(
        rank=rank,
        version=version,
        pg_config=pg_config,
        pg_desc=pg_desc,
        pg_status=_pg_status(top.get("pg_status"), warnings),
        comm_lib_version=comm if isinstance(comm, str) and comm else None,
        entries=tuple(entries),
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
    if isinstance(value, (list, tuple)) and all(type(r) is int for r in value):
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
        return tuple(json.loads(f"[{inner}]"))
    except (ValueError, RecursionError):
        return None


def _repair_gloo_pg_config(
    config: dict[str, tuple[int, ...]], entries: list[FlightRecorderEntry]
) -> None:
    # gloo dumps name their only pg_config key '' (formats.md §4.7 caveat 2). With a single
    # process group in the entries, that membership belongs to it.
    if "" not in config:
        return
    members = config.pop("")
    names = {entry.pg_name for entry in entries}
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
    for key, fields in raw.items():
        if not isinstance(fields, dict):
            continue
        values: dict[str, int] = {}
        for field, value in fields.items():
            number = _int_or_text(value)  # JSON dumps write these as strings
            if isinstance(field, str) and number is not None:
                values[field] = number
        status[str(key)] = values
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
) -> tuple[list[FlightRecorderEntry], int, dict[str, int]]:
    # Caches share identical shapes, dtypes and stacks between entries: a 2,000-entry dump of
    # one training loop repeats the same handful, and sharing keeps 1,024-rank jobs small.
    cache: dict[Any, Any] = {}
    try:
        fast = _entries_by_column(raw_entries, cache, first_index)
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
                raise _BadEntry("entry is not a dict")
            entries.append(_entry(raw, first_index + index, cache))
        except _BadEntry as bad:
            reason = str(bad)
            reasons[reason] = reasons.get(reason, 0) + 1
    return entries, sum(reasons.values()), reasons


_NONE = type(None)


def _column_types(column: list[Any]) -> set[type]:
    return set(map(type, column))


def _entries_by_column(
    raw: list[Any], cache: dict[Any, Any], first_index: int = 0
) -> list[FlightRecorderEntry] | None:
    """All entries at once, field by field: the fast path for a well-formed dump.

    Each field is read for every entry in one comprehension and checked by the set of types
    it holds, so the per-entry Python work is a few list items instead of ~20 calls. Returns
    None when any entry would be skipped or needs the era-by-era inference of `_entry`; the
    caller then builds entry by entry and counts what it skips. Same result either way.
    """
    if not raw or _column_types(raw) != {dict}:
        return None

    n = len(raw)

    def column(key: str) -> list[Any]:
        return list(map(dict.get, raw, repeat(key, n)))  # at C speed: no frame per entry

    names = column("profiling_name")
    if _column_types(names) != {str}:
        return None
    names = list(map(cache.setdefault, names, names))
    seqs = column("collective_seq_id")
    if _column_types(seqs) == {_NONE}:
        seqs = column("seq_id")
    if _column_types(seqs) != {int}:
        return None

    groups = column("process_group")
    kinds = _column_types(groups)
    if kinds == {_NONE}:
        ids = column("pg_id")
        pg_names = [str(i) if type(i) is int else "" for i in ids]
        pg_descs = [""] * len(raw)
    elif kinds <= {tuple, list}:
        pairs = {(tuple(g) if type(g) is list else g) for g in groups}
        if not all(len(p) == 2 and type(p[0]) is str and type(p[1]) is str for p in pairs):
            return None
        pg_names = [g[0] for g in groups]
        pg_descs = [g[1] for g in groups]
        pg_names = list(map(cache.setdefault, pg_names, pg_names))
        pg_descs = list(map(cache.setdefault, pg_descs, pg_descs))
    else:
        return None

    p2p = column("is_p2p")
    kinds = _column_types(p2p)
    if kinds == {_NONE}:
        p2p = [n.split(":", 1)[-1].split(" ", 1)[0] in _P2P_OPS for n in names]
    elif kinds != {bool}:
        return None

    started = column("time_discovered_started_ns")
    completed = column("time_discovered_completed_ns")
    created = column("time_created_ns")
    if not (
        _column_types(started) <= {int, _NONE}
        and _column_types(completed) <= {int, _NONE}
        and _column_types(created) <= {int, _NONE}
    ):
        return None
    started = [t or None for t in started]  # JSON writes 0 for "not discovered"
    completed = [t or None for t in completed]

    states = column("state")
    kinds = _column_types(states)
    if kinds == {_NONE}:
        states = [
            "completed" if c else "started" if s else "scheduled"
            for s, c in zip(started, completed, strict=True)
        ]
    elif kinds == {str} and set(states) <= _STATES.keys():
        states = [_STATES[s] for s in states]
    else:
        return None

    durations = column("duration_ms")
    kinds = _column_types(durations)
    if not kinds <= {float, int, _NONE}:
        return None
    if int in kinds:
        durations = [d if type(d) is not int else float(d) for d in durations]
    durations = _shared(_SHARED_FLOATS, durations)
    timeouts = column("timeout_ms")
    retired = column("retired")
    if not (_column_types(timeouts) <= {int, _NONE} and _column_types(retired) <= {bool, _NONE}):
        return None

    records = [e.get("record_id", i) for i, e in enumerate(raw, first_index)]
    p2p_seqs = [e.get("p2p_seq_id", 0) for e in raw]
    op_ids = [e.get("op_id", s) for e, s in zip(raw, seqs, strict=True)]
    if not _column_types(records) == _column_types(p2p_seqs) == _column_types(op_ids) == {int}:
        return None
    seqs, records, p2p_seqs, timeouts = (
        _shared(_SHARED_INTS, seqs),
        _shared(_SHARED_INTS, records),
        _shared(_SHARED_INTS, p2p_seqs),
        _shared(_SHARED_INTS, timeouts),
    )
    op_ids = _shared(_SHARED_INTS, op_ids)

    in_sizes = _size_column(column("input_sizes"), cache)
    out_sizes = _size_column(column("output_sizes"), cache)
    in_types = _dtype_column(column("input_dtypes"), cache)
    out_types = _dtype_column(column("output_dtypes"), cache)
    if in_sizes is None or out_sizes is None or in_types is None or out_types is None:
        return None
    frames = [_frames(f, cache) for f in column("frames")]

    return list(
        map(
            _new_entry,
            zip(
                records,
                pg_names,
                pg_descs,
                seqs,
                p2p_seqs,
                op_ids,
                p2p,
                names,
                in_sizes,
                out_sizes,
                in_types,
                out_types,
                states,
                created,
                started,
                completed,
                durations,
                timeouts,
                retired,
                frames,
                strict=True,
            ),
        )
    )


def _shared(table: dict[Any, Any], values: list[Any]) -> list[Any]:
    """`values` with equal numbers as one object (one table per type: 1 == 1.0 == True)."""
    if len(table) > _SHARED_MAX:
        table.clear()
    return list(map(table.setdefault, values, values))


def entry_columns(entries: Sequence[FlightRecorderEntry]) -> list[tuple[Any, ...]]:
    """Entries as one plain tuple per field, for handing a parsed dump from a worker process
    to the main one: plain tuples pickle and unpickle at C speed (a NamedTuple unpickles
    through its Python `__new__`), and `entries_from_columns` shares numbers again."""
    return list(zip(*entries, strict=True))


def entries_from_columns(columns: Sequence[tuple[Any, ...]]) -> tuple[FlightRecorderEntry, ...]:
    """The inverse of `entry_columns`, numbers shared as the parser shares them."""
    if not columns:
        return ()
    fields: list[Any] = list(columns)
    for i in _INT_FIELDS:
        fields[i] = _shared(_SHARED_INTS, fields[i])
    for i in _FLOAT_FIELDS:
        fields[i] = _shared(_SHARED_FLOATS, fields[i])
    return tuple(map(_new_entry, zip(*fields, strict=True)))


def _size_column(values: list[Any], cache: dict[Any, Any]) -> list[Any] | None:
    """Shapes of every entry as shared tuples, or None if any entry's shapes are malformed."""
    if not _column_types(values) <= {list, tuple, _NONE}:
        return None
    # TypeError (a shape that is not a sequence, an unhashable dim) reaches the caller,
    # which falls back to the entry-by-entry path and its per-entry verdict.
    keys = [() if v is None else tuple(map(tuple, v)) for v in values]
    shared: dict[Any, Any] = {}
    for shapes in set(keys):
        key = ("sizes", shapes)
        if key not in cache:
            if not all(type(dim) is int for shape in shapes for dim in shape):
                return None
            cache[key] = shapes
        shared[shapes] = cache[key]
    return list(map(shared.__getitem__, keys))


def _dtype_column(values: list[Any], cache: dict[Any, Any]) -> list[Any] | None:
    """Dtype names of every entry as shared tuples, or None if any entry's are malformed."""
    if not _column_types(values) <= {list, tuple, _NONE}:
        return None
    keys = [() if v is None else tuple(v) for v in values]
    shared: dict[Any, Any] = {}
    for names in set(keys):
        key = ("dtypes", names)
        if key not in cache:
            if not all(type(name) is str for name in names):
                return None
            cache[key] = names
        shared[names] = cache[key]
    return list(map(shared.__getitem__, keys))


def _entry(raw: dict[str, Any], index: int, cache: dict[Any, Any]) -> FlightRecorderEntry:
    get = raw.get
    name = get("profiling_name")
    if type(name) is not str:
        raise _BadEntry("profiling_name missing or not a string")
    # JSON gives every entry its own copy of each string; share them (pickle already does).
    name = cache.setdefault(name, name)

    seq = get("collective_seq_id")
    if seq is None:
        seq = get("seq_id")  # before the collective/p2p split (torch <= 2.3)
    if type(seq) is not int:
        raise _BadEntry("no integer collective_seq_id/seq_id")

    pg_name, pg_desc = _process_group(get("process_group"), get("pg_id"), cache)
    is_p2p = get("is_p2p")
    if is_p2p is None:  # early eras: tell from the op name ("nccl:send 0->1")
        is_p2p = name.split(":", 1)[-1].split(" ", 1)[0] in _P2P_OPS
    elif type(is_p2p) is not bool:
        raise _BadEntry("is_p2p not a bool")

    started = _time_ns(get("time_discovered_started_ns"), "time_discovered_started_ns")
    completed = _time_ns(get("time_discovered_completed_ns"), "time_discovered_completed_ns")
    state = get("state")
    if state is None:  # early dumps: infer from what was discovered
        state = "completed" if completed else "started" if started else "scheduled"
    elif type(state) is not str or state not in _STATES:
        raise _BadEntry("state not scheduled/started/completed")
    else:
        state = _STATES[state]

    created = get("time_created_ns")
    if created is not None and type(created) is not int:
        raise _BadEntry("time_created_ns not an integer")
    duration = get("duration_ms")
    if duration is not None:
        if type(duration) not in (float, int):
            raise _BadEntry("duration_ms not a number")
        duration = float(duration)
    timeout = get("timeout_ms")
    if timeout is not None and type(timeout) is not int:
        raise _BadEntry("timeout_ms not an integer")
    retired = get("retired")
    if retired is not None and type(retired) is not bool:
        raise _BadEntry("retired not a bool")
    record_id = get("record_id", index)
    p2p_seq = get("p2p_seq_id", 0)
    op_id = get("op_id", seq)
    if type(record_id) is not int or type(p2p_seq) is not int or type(op_id) is not int:
        raise _BadEntry("record_id/p2p_seq_id/op_id not integers")

    return FlightRecorderEntry(
        record_id=record_id,
        pg_name=pg_name,
        pg_desc=pg_desc,
        collective_seq_id=seq,
        p2p_seq_id=p2p_seq,
        op_id=op_id,
        is_p2p=is_p2p,
        profiling_name=name,
        input_sizes=_sizes(get("input_sizes"), cache, "input_sizes"),
        output_sizes=_sizes(get("output_sizes"), cache, "output_sizes"),
        input_dtypes=_dtypes(get("input_dtypes"), cache, "input_dtypes"),
        output_dtypes=_dtypes(get("output_dtypes"), cache, "output_dtypes"),
        state=state,
        time_created_ns=created,
        time_started_ns=started,
        time_completed_ns=completed,
        duration_ms=duration,
        timeout_ms=timeout,
        retired=retired,
        frames=_frames(get("frames"), cache),
    )


def _process_group(value: Any, pg_id: Any, cache: dict[Any, Any]) -> tuple[str, str]:
    if type(value) in (tuple, list) and len(value) == 2:
        name, desc = value
        if type(name) is str and type(desc) is str:
            return cache.setdefault(name, name), cache.setdefault(desc, desc)
        raise _BadEntry("process_group is not a (name, desc) pair of strings")
    if value is not None:
        raise _BadEntry("process_group is not a (name, desc) pair of strings")
    # Eras before process_group only had the numeric pg_id (or nothing: one default group).
    if type(pg_id) is int:
        return str(pg_id), ""
    return "", ""


def _time_ns(value: Any, field: str) -> int | None:
    if value is None or value == 0:  # JSON writes 0 for "not discovered", pickle None
        return None
    if type(value) is not int:
        raise _BadEntry(f"{field} not an integer")
    return value


def _sizes(value: Any, cache: dict[Any, Any], field: str) -> tuple[tuple[int, ...], ...]:
    if value is None:
        return ()
    if type(value) is not list and type(value) is not tuple:
        raise _BadEntry(f"{field} not a list of shapes")
    try:
        shapes = tuple(tuple(shape) for shape in value)
    except TypeError:
        raise _BadEntry(f"{field} not a list of shapes") from None
    key = ("sizes", shapes)
    try:
        hit = cache.get(key)
    except TypeError:  # an unhashable item (a dict, a list) inside a shape
        raise _BadEntry(f"{field} not a list of shapes") from None
    if hit is None:
        if not all(type(dim) is int for shape in shapes for dim in shape):
            raise _BadEntry(f"{field} not a list of integer shapes")
        cache[key] = hit = shapes
    return hit


def _dtypes(value: Any, cache: dict[Any, Any], field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if type(value) is not list and type(value) is not tuple:
        raise _BadEntry(f"{field} not a list of strings")
    names = tuple(value)
    key = ("dtypes", names)
    try:
        hit = cache.get(key)
    except TypeError:
        raise _BadEntry(f"{field} not a list of strings") from None
    if hit is None:
        if not all(type(name) is str for name in names):
            raise _BadEntry(f"{field} not a list of strings")
        cache[key] = hit = names
    return hit


def _frames(value: Any, cache: dict[Any, Any]) -> tuple[StackFrame, ...]:
    # Frames are context, not identity: a malformed stack drops the stack, not the entry.
    if not value or type(value) is not list:
        return ()
    # torch's pickler memoizes frame dicts, so one stack is the same objects in every entry:
    # key on their ids (valid while the raw dump is alive, which it is for the whole build).
    frames = value[:_MAX_FRAMES]
    key = ("stack", *map(id, frames))
    hit = cache.get(key)
    if hit is not None:
        return hit
    try:
        # Copies of one stack that share no objects (JSON, dumps written frame by frame) have
        # equal items: a key built at C speed, checked before any field is read.
        item_key: tuple[Any, ...] | None = ("stack-items", *[tuple(f.items()) for f in frames])
        hit = cache.get(item_key)
    except (AttributeError, TypeError):  # a frame that is not a dict, an unhashable value
        item_key = None
    if hit is not None:
        return hit
    content: list[tuple[str, str, int | None]] = []
    for frame in frames:
        if type(frame) is not dict:
            return ()
        func, filename, line = frame.get("name"), frame.get("filename"), frame.get("line")
        if type(func) is not str or type(filename) is not str:
            return ()
        content.append((func, filename, line if type(line) is int else None))
    # JSON and re-pickled dumps repeat the content without sharing objects: share by content,
    # and build the StackFrames only for the first copy.
    content_key = ("stack-content", *content)
    stack = cache.get(content_key)
    if stack is None:
        stack = tuple(map(_new_frame, content))
        cache[content_key] = stack
    cache[key] = stack
    if item_key is not None:
        cache[item_key] = stack
    return stack


# --------------------------------------------------------------------------- summary


def _summary(dump: FlightRecorderDump) -> str:
    """One line a person (and a regex rule) can read, e.g.
    `FR dump v2.10, 12 entries, pgs 0:default_pg, last seq 12 all_reduce (completed)`."""
    version = f"v{dump.version}" if dump.version else "(pre-2.3 list)"
    held = f"{len(dump.entries)} entries"
    if dump.entries_total is not None:
        held = f"{dump.entries_total} entries (last {len(dump.entries)} read)"
    parts = [f"FR dump {version}", held]
    names = list(dict.fromkeys([*dump.pg_config, *(e.pg_name for e in dump.entries[-256:])]))
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


def _attrs(dump: FlightRecorderDump, data: bytes) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "format": _format_of(data),
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


def _failed(source: Source, why: str, warnings: list[str], size: int) -> ParsedSource:
    warnings.append(why)
    event = input_warning(source, why, "flight_recorder")
    return ParsedSource(source=source, events=(event,), warnings=tuple(warnings), bytes_read=size)
