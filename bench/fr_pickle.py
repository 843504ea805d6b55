"""Pickle a flight-recorder dump byte for byte as torch's C++ pickler writes it.

torch writes FR dumps with `torch::jit::Pickler` (torch/csrc/jit/serialization/pickler.cpp),
not with Python's pickler, and the two lay the same object out differently:

* strings are memoized by value: the first `BINUNICODE` + `BINPUT`, then `BINGET` (Python
  memoizes by identity, so two equal strings are two copies);
* containers are memoized only when something else holds them too (`use_count() > 1`): the
  top-level dict (its caller holds it) and the frame dicts (the dump's table of symbolized
  frames holds them), each with a `BINPUT` *after* its closing opcode. Entry dicts, lists and
  tuples are not memoized (Python's pickler memoizes every one, before its items);
* a dict is always `EMPTY_DICT MARK ... SETITEMS` and a list `EMPTY_LIST MARK ... APPENDS`,
  empty ones included, never batched by 1,000 (Python writes `}` / `]` alone when empty,
  `SETITEM`/`APPEND` for one item, and a new batch every 1,000 items);
* integers take the narrowest of BININT1 / BININT2 (unsigned), BININT (signed 32 bits), else
  LONG1 with always 8 bytes (Python's LONG1 uses as few bytes as the value needs).

Hand-written because no library writes torch's layout outside torch itself, and torch writes
it only from a live process group's ring buffer (`_dump_fr_trace`), not from an object: the
bench needs 1,024 ranks' dumps of its own choosing, and corpus_samples/make.py rewrites the
scrubbed copies of real dumps. tests/test_fr_layouts.py pickles the objects loaded from real
gloo dumps (bench/samples/fr/) with this writer and compares the bytes.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["dumps", "share_frames"]

_INT64 = (-(1 << 63), (1 << 63) - 1)


def dumps(obj: Any) -> bytes:
    """`obj` (plain dicts, lists, tuples, str, int, float, bool, None) in torch's layout.

    A container held more than once in `obj` is memoized where first written and named by
    memo afterwards, as torch does for any container whose `use_count()` is over one (in a
    dump: the frame dicts of its symbolized-frame table that two entries share); so is the
    top-level container, which torch's caller holds.
    """
    refs = _references(obj)
    out: list[bytes] = [b"\x80\x02"]
    add = out.append
    strings: dict[str, int] = {}
    containers: dict[int, int] = {}  # id -> slot; `obj` keeps them alive, so ids stay unique

    def put() -> int:
        """The next memo slot, written as torch's pushNextBinPut does."""
        slot = len(strings) + len(containers)
        add(b"q" + bytes((slot,)) if slot < 256 else b"r" + slot.to_bytes(4, "little"))
        return slot

    def get(slot: int) -> None:
        add(b"h" + bytes((slot,)) if slot < 256 else b"j" + slot.to_bytes(4, "little"))

    def memoize(item: Any) -> None:
        containers[id(item)] = put()

    def write(item: Any, memo: bool = False) -> None:
        kind = type(item)
        if kind is str:
            slot = strings.get(item)
            if slot is not None:
                get(slot)
                return
            raw = item.encode("utf-8", "surrogatepass")
            add(b"X" + len(raw).to_bytes(4, "little") + raw)
            strings[item] = put()
            return
        if kind is bool:
            add(b"\x88" if item else b"\x89")
            return
        if kind is int:
            if 0 <= item <= 0xFF:
                add(b"K" + bytes((item,)))
            elif 0 <= item <= 0xFFFF:
                add(b"M" + item.to_bytes(2, "little"))
            elif -(1 << 31) <= item < (1 << 31):
                add(b"J" + item.to_bytes(4, "little", signed=True))
            elif _INT64[0] <= item <= _INT64[1]:
                add(b"\x8a\x08" + item.to_bytes(8, "little", signed=True))
            else:
                raise ValueError(f"{item} does not fit torch's int64")
            return
        if item is None:
            add(b"N")
            return
        if kind is float:
            add(b"G" + struct.pack(">d", item))
            return
        if kind not in (dict, list, tuple):
            raise TypeError(f"torch's flight recorder writes no {kind.__name__}")
        slot = containers.get(id(item))
        if slot is not None:
            get(slot)
            return
        if kind is dict:
            add(b"}(")
            for key, value in item.items():
                write(key)
                write(value)
            add(b"u")
        elif kind is list:
            add(b"](")
            for value in item:
                write(value)
            add(b"e")
        else:
            n = len(item)
            if n == 0:
                add(b")")
            elif n <= 3:
                for value in item:
                    write(value)
                add(b"\x85\x86\x87"[n - 1 : n])
            else:
                add(b"(")
                for value in item:
                    write(value)
                add(b"t")
        if memo or refs.get(id(item), 0) > 1:
            memoize(item)

    write(obj, memo=True)
    add(b".")
    return b"".join(out)


def _references(obj: Any) -> dict[int, int]:
    """How many times each container is held inside `obj` (by id); its items are counted once."""
    counts: dict[int, int] = {}
    todo = [obj]
    while todo:
        item = todo.pop()
        kind = type(item)
        if kind is not dict and kind is not list and kind is not tuple:
            continue
        key = id(item)
        counts[key] = counts.get(key, 0) + 1
        if counts[key] == 1:
            todo.extend(item.values() if kind is dict else item)
    return counts


def share_frames(dump: Any) -> Any:
    """`dump` with equal frame dicts made one object, as in torch's symbolized-frame table.

    A dump loaded from Python's pickler after a copy (corpus_samples/make.py scrubbed its dumps
    dict by dict), from JSON, or built entry by entry has a fresh copy of each frame per
    entry; torch held one dict per distinct frame, which `dumps` then names by memo.
    """
    if type(dump) is not dict or type(dump.get("entries")) is not list:
        return dump
    table: dict[tuple[Any, ...], Any] = {}
    for entry in dump["entries"]:
        frames = entry.get("frames") if type(entry) is dict else None
        if type(frames) is list:
            entry["frames"] = [
                table.setdefault(tuple(f.items()), f) if type(f) is dict else f for f in frames
            ]
    return dump
