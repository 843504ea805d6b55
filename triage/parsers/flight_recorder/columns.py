"""All entries of a well-formed dump at once, field by field, into the EntryTable the
analysis reads (the codec the worker pool hands parsed dumps back with)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

from triage.model import EntryTable, FlightRecorderEntry
from triage.model.entry_table import Column
from triage.parsers.flight_recorder.entries import P2P_OPS, STATES, entry_frames

__all__ = ["entries_by_column", "entries_from_columns", "entry_columns"]

_NONE = type(None)
_FIRST, _SECOND = itemgetter(0), itemgetter(1)


def _column_types(column: list[Any]) -> set[type]:
    return set(map(type, column))


def entries_by_column(
    raw: list[Any], cache: dict[Any, Any], first_index: int = 0
) -> EntryTable | None:
    """All entries at once, field by field: the fast path for a well-formed dump.

    Each field is read for every entry at C speed and checked by the set of types it holds,
    so the per-entry Python work is a few list items instead of ~20 calls. Returns
    None when any entry would be skipped or needs the era-by-era inference of `entry_of`; the
    caller then builds entry by entry and counts what it skips. Same result either way.
    """
    if not raw or _column_types(raw) != {dict}:
        return None

    n = len(raw)
    held = _fields_held(raw)

    def column(key: str) -> Sequence[Any]:
        got = held.get(key)
        return list(map(dict.get, raw, repeat(key, n))) if got is None else got

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
        # read and checked item by item, never hashed whole (see _size_column)
        if set(map(len, groups)) != {2}:
            return None
        pg_names = list(map(_FIRST, groups))
        pg_descs = list(map(_SECOND, groups))
        if _column_types(pg_names) != {str} or _column_types(pg_descs) != {str}:
            return None
        pg_names = list(map(cache.setdefault, pg_names, pg_names))
        pg_descs = list(map(cache.setdefault, pg_descs, pg_descs))
    else:
        return None

    p2p = column("is_p2p")
    kinds = _column_types(p2p)
    if kinds == {_NONE}:
        p2p = [n.split(":", 1)[-1].split(" ", 1)[0] in P2P_OPS for n in names]
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
    # JSON writes 0 for "not discovered" (types are int or None here: 0 finds only 0)
    if 0 in started:
        started = [t or None for t in started]
    if 0 in completed:
        completed = [t or None for t in completed]

    states = column("state")
    kinds = _column_types(states)
    if kinds == {_NONE}:
        states = [
            "completed" if c else "started" if s else "scheduled"
            for s, c in zip(started, completed, strict=True)
        ]
    elif kinds == {str} and set(states) <= STATES.keys():
        states = list(map(STATES.__getitem__, states))
    else:
        return None

    durations = column("duration_ms")
    kinds = _column_types(durations)
    if not kinds <= {float, int, _NONE}:
        return None
    if int in kinds:
        durations = [d if type(d) is not int else float(d) for d in durations]
    timeouts = column("timeout_ms")
    retired = column("retired")
    if not (_column_types(timeouts) <= {int, _NONE} and _column_types(retired) <= {bool, _NONE}):
        return None

    # each with its default where an entry lacks it (its place, 0, its seq), at C speed
    records = held.get("record_id") or list(
        map(dict.get, raw, repeat("record_id", n), range(first_index, first_index + n))
    )
    p2p_seqs = held.get("p2p_seq_id") or list(
        map(dict.get, raw, repeat("p2p_seq_id", n), repeat(0, n))
    )
    op_ids = held.get("op_id") or list(map(dict.get, raw, repeat("op_id", n), seqs))
    if not _column_types(records) == _column_types(p2p_seqs) == _column_types(op_ids) == {int}:
        return None

    in_sizes = _size_column(column("input_sizes"), cache)
    out_sizes = _size_column(column("output_sizes"), cache)
    in_types = _dtype_column(column("input_dtypes"), cache)
    out_types = _dtype_column(column("output_dtypes"), cache)
    if in_sizes is None or out_sizes is None or in_types is None or out_types is None:
        return None
    frames = _frames_column(column("frames"), cache)

    return _table(
        [
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
        ],
        n,
    )


def _table(columns: list[Sequence[Any]], n: int) -> EntryTable:
    """The table of these columns (one per entry field, each `n` long); a column holding one
    value throughout (a job's one group, op, shape or timeout; a ring buffer of completed
    ops) is coded here with one C-speed count instead of `Column.of`'s passes."""
    return EntryTable([_constant(c, n) or Column.of(c) for c in columns], n)


# Types whose equal values are one value: not float (0.0 == -0.0, which Column.of keeps
# apart). 1 == True == 1.0 across types, but no column reaching `_constant` mixes them: the
# column path checked each column's types first.
_PLAIN = frozenset({str, int, bool, _NONE, tuple})


def _constant(column: Sequence[Any], n: int) -> Column | None:
    """The coded column of `column` when it holds n equal values, else None. Tuples here are
    the shapes, dtypes and stacks the column path checked and built: comparing them costs
    their own size, whatever the dump held."""
    if not n or type(column[0]) not in _PLAIN or column.count(column[0]) != n:
        return None
    return Column(values=(column[0],), codes=array("B", bytes(n)))


# Every key the column path reads.
_KEYS = (
    "profiling_name",
    "collective_seq_id",
    "seq_id",
    "process_group",
    "pg_id",
    "is_p2p",
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
    "time_created_ns",
    "state",
    "duration_ms",
    "timeout_ms",
    "retired",
    "record_id",
    "p2p_seq_id",
    "op_id",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "frames",
)


def _fields_held(raw: list[dict[Any, Any]]) -> dict[str, tuple[Any, ...]]:
    """The values of each key the first entry holds, for every entry, when every entry holds
    them all (else nothing): read in one pass, entry by entry at C speed. Reading key by key
    walks 2,000 dicts twenty times, each pass missing the CPU's caches."""
    keys = [key for key in _KEYS if key in raw[0]]
    if len(keys) < 2:  # one key: itemgetter gives the value, not a tuple
        return {}
    try:
        rows = list(map(itemgetter(*keys), raw))
    except KeyError:  # an entry lacks one: read key by key, with each key's default
        return {}
    return dict(zip(keys, zip(*rows, strict=True), strict=True))


def entry_columns(entries: Sequence[FlightRecorderEntry]) -> EntryTable:
    """Entries as the table a worker process hands a parsed dump back in: its typed arrays
    and small value tables pickle as a few byte strings, not one object per entry."""
    return EntryTable.of(entries)


def entries_from_columns(table: EntryTable) -> EntryTable:
    """The inverse of `entry_columns`: unpickling already shared the value tables again."""
    return table


def _size_column(values: list[Any], cache: dict[Any, Any]) -> list[Any] | None:
    """Shapes of every entry as shared tuples, or None if any entry's shapes are malformed."""
    kinds = _column_types(values)
    if not kinds <= {list, tuple, _NONE}:
        return None
    # TypeError (a shape that is not a sequence) reaches the caller, which falls back to
    # the entry-by-entry path and its per-entry verdict; so does None, returned below.
    if _NONE in kinds:
        keys = [() if v is None else tuple(map(tuple, v)) for v in values]
    elif set(map(len, values)) == {1}:  # one tensor an entry, as most collectives: C speed
        keys = list(zip(map(tuple, map(_FIRST, values))))
    else:  # each entry's shapes as a tuple of tuples (one tuple call per shape)
        keys = [tuple(map(tuple, v)) for v in values]
    # Every dim an int before any key is hashed: a tuple for a dim may nest without end or
    # hold one tuple many times over (a few bytes of pickle), and hashing it never returns.
    if not _column_types(list(chain.from_iterable(chain.from_iterable(keys)))) <= {int}:
        return None
    shared: dict[Any, Any] = {}
    for shapes in set(keys):
        shared[shapes] = cache.setdefault(("sizes", shapes), shapes)
    return list(map(shared.__getitem__, keys))


def _dtype_column(values: list[Any], cache: dict[Any, Any]) -> list[Any] | None:
    """Dtype names of every entry as shared tuples, or None if any entry's are malformed."""
    kinds = _column_types(values)
    if not kinds <= {list, tuple, _NONE}:
        return None
    keys = (
        [() if v is None else tuple(v) for v in values] if _NONE in kinds else [*map(tuple, values)]
    )
    if not _column_types(list(chain.from_iterable(keys))) <= {str}:  # before hashing them
        return None
    shared: dict[Any, Any] = {}
    for names in set(keys):
        shared[names] = cache.setdefault(("dtypes", names), names)
    return list(map(shared.__getitem__, keys))


def _frames_column(values: list[Any], cache: dict[Any, Any]) -> list[Any]:
    """Each entry's stack. A pickle shares one object per distinct frame (torch's frame
    table, Python's memo): entries are grouped by the ids of their frames at C speed and
    each stack is read once, for the first entry that holds it."""
    if not _column_types(values) <= {list}:
        return [entry_frames(v, cache) for v in values]
    keys = list(map(tuple, map(map, repeat(id), values)))  # valid while `values` lives
    held = dict(zip(keys, values, strict=True))  # one entry per stack: the same objects
    stacks = {key: entry_frames(value, cache) for key, value in held.items()}
    return list(map(stacks.__getitem__, keys))
