"""One entry at a time, for dumps the column path refuses: each field checked, era by era,
and a bad entry skipped with its reason (`BadEntry`)."""

from __future__ import annotations

from functools import partial
from itertools import chain
from typing import Any

from triage.model import FlightRecorderEntry, StackFrame

__all__ = ["MAX_FRAMES", "P2P_OPS", "STATES", "BadEntry", "entry_frames", "entry_of", "fits"]

MAX_FRAMES = 256  # per entry; deeper stacks are cut (the innermost frames matter most)
P2P_OPS = frozenset({"send", "recv", "isend", "irecv"})
STATES = {s: s for s in ("scheduled", "started", "completed")}  # also interns them
_new_frame = partial(tuple.__new__, StackFrame)
# Values hashed in one step, whatever a hostile dump holds.
_FLAT = frozenset({str, int, float, bool, type(None), bytes})


# The widest integer a dump may hold: what the safety scan lets through (64 bytes, two's
# complement). Wider ones come as decimal text or from a load the scan did not precede, and
# overflow the float a timestamp becomes or take long to print.
_INT_BOUND = 1 << (8 * 64 - 1)


def fits(value: int) -> bool:
    """Is `value` an integer a dump may hold (see _INT_BOUND)?"""
    return -_INT_BOUND <= value < _INT_BOUND


class BadEntry(Exception):
    """An entry field has the wrong type; the entry is skipped."""


def entry_of(raw: dict[str, Any], index: int, cache: dict[Any, Any]) -> FlightRecorderEntry:
    get = raw.get
    name = get("profiling_name")
    if type(name) is not str:
        raise BadEntry("profiling_name missing or not a string")
    # JSON gives every entry its own copy of each string; share them (pickle already does).
    name = cache.setdefault(name, name)

    seq = get("collective_seq_id")
    if seq is None:
        seq = get("seq_id")  # before the collective/p2p split (torch <= 2.3)
    if type(seq) is not int:
        raise BadEntry("no integer collective_seq_id/seq_id")

    pg_name, pg_desc = _process_group(get("process_group"), get("pg_id"), cache)
    is_p2p = get("is_p2p")
    if is_p2p is None:  # early eras: tell from the op name ("nccl:send 0->1")
        is_p2p = name.split(":", 1)[-1].split(" ", 1)[0] in P2P_OPS
    elif type(is_p2p) is not bool:
        raise BadEntry("is_p2p not a bool")

    started = _time_ns(get("time_discovered_started_ns"), "time_discovered_started_ns")
    completed = _time_ns(get("time_discovered_completed_ns"), "time_discovered_completed_ns")
    state = get("state")
    if state is None:  # early dumps: infer from what was discovered
        state = "completed" if completed else "started" if started else "scheduled"
    elif type(state) is not str or state not in STATES:
        raise BadEntry("state not scheduled/started/completed")
    else:
        state = STATES[state]

    created = get("time_created_ns")
    if created is not None and type(created) is not int:
        raise BadEntry("time_created_ns not an integer")
    duration = get("duration_ms")
    if duration is not None:
        if type(duration) not in (float, int):
            raise BadEntry("duration_ms not a number")
        duration = float(duration)
    timeout = get("timeout_ms")
    if timeout is not None and type(timeout) is not int:
        raise BadEntry("timeout_ms not an integer")
    retired = get("retired")
    if retired is not None and type(retired) is not bool:
        raise BadEntry("retired not a bool")
    record_id = get("record_id", index)
    p2p_seq = get("p2p_seq_id", 0)
    op_id = get("op_id", seq)
    if type(record_id) is not int or type(p2p_seq) is not int or type(op_id) is not int:
        raise BadEntry("record_id/p2p_seq_id/op_id not integers")
    numbers = (seq, record_id, p2p_seq, op_id, created, started, completed, timeout)
    if not all(map(fits, filter(None, numbers))):
        raise BadEntry("an integer field wider than 64 bytes")

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
        frames=entry_frames(get("frames"), cache),
    )


def _process_group(value: Any, pg_id: Any, cache: dict[Any, Any]) -> tuple[str, str]:
    if type(value) in (tuple, list) and len(value) == 2:
        name, desc = value
        if type(name) is str and type(desc) is str:
            return cache.setdefault(name, name), cache.setdefault(desc, desc)
        raise BadEntry("process_group is not a (name, desc) pair of strings")
    if value is not None:
        raise BadEntry("process_group is not a (name, desc) pair of strings")
    # Eras before process_group only had the numeric pg_id (or nothing: one default group).
    if type(pg_id) is int:
        return str(pg_id), ""
    return "", ""


def _time_ns(value: Any, field: str) -> int | None:
    if value is None or value == 0:  # JSON writes 0 for "not discovered", pickle None
        return None
    if type(value) is not int:
        raise BadEntry(f"{field} not an integer")
    return value


def _sizes(value: Any, cache: dict[Any, Any], field: str) -> tuple[tuple[int, ...], ...]:
    if value is None:
        return ()
    if type(value) is not list and type(value) is not tuple:
        raise BadEntry(f"{field} not a list of shapes")
    try:
        shapes = tuple(tuple(shape) for shape in value)
    except TypeError:
        raise BadEntry(f"{field} not a list of shapes") from None
    # checked before the shapes are hashed: a tuple for a dim may nest without end or
    # hold one tuple many times over, and hashing it would never return
    if not all(type(dim) is int and fits(dim) for shape in shapes for dim in shape):
        raise BadEntry(f"{field} not a list of integer shapes")
    return cache.setdefault(("sizes", shapes), shapes)


def _dtypes(value: Any, cache: dict[Any, Any], field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if type(value) is not list and type(value) is not tuple:
        raise BadEntry(f"{field} not a list of strings")
    names = tuple(value)
    if not all(type(name) is str for name in names):  # before hashing them (see _sizes)
        raise BadEntry(f"{field} not a list of strings")
    return cache.setdefault(("dtypes", names), names)


def entry_frames(value: Any, cache: dict[Any, Any]) -> tuple[StackFrame, ...]:
    # Frames are context, not identity: a malformed stack drops the stack, not the entry.
    if not value or type(value) is not list:
        return ()
    # torch's pickler memoizes frame dicts, so one stack is the same objects in every entry:
    # key on their ids (valid while the raw dump is alive, which it is for the whole build).
    frames = value[:MAX_FRAMES]
    key = ("stack", *map(id, frames))
    hit = cache.get(key)
    if hit is not None:
        return hit
    item_key: tuple[Any, ...] | None = None
    try:
        # Copies of one stack that share no objects (JSON, dumps written frame by frame) have
        # equal items: a key built at C speed, checked before any field is read. Only flat
        # values are hashed: a tuple may nest without end or hold one tuple many times over.
        if set(map(type, chain.from_iterable(map(dict.values, frames)))) <= _FLAT:
            item_key = ("stack-items", *[tuple(f.items()) for f in frames])
            hit = cache.get(item_key)
    except TypeError:  # a frame that is not a dict
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
        content.append((func, filename, line if type(line) is int and fits(line) else None))
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
