"""Finding, in a protocol-2 pickle's bytes, what a piece cut from it refers to by memo slot.

A piece cut from later in a dump names strings (and in torch's layout frame dicts) that the
dump defined before the cut; these functions find the opcodes that defined them, bounded so
that a crafted piece cannot make the search cost more than reading the whole pickle.
"""

from __future__ import annotations

import re
from typing import Literal, overload

from triage.parsers.flight_recorder.safe_pickle import PickleError, scan

__all__ = ["SearchBudgetSpent", "memo_definitions", "memo_gets", "memo_strings"]


# Where a piece may read the memo: BINGET (`h`, 1-byte slot) and LONG_BINGET (`j`, 4-byte
# slot). Found by byte pattern, so payload bytes that look like a get count too: a superset.
# The `j` regex matches the opcode byte alone (the slot in a lookahead) so that a slot's
# bytes can start another match.
_LONG_BINGETS = re.compile(rb"j(?=(.{4}))", re.DOTALL)
_MAX_STRING = 4096  # longest memo string looked for (names, paths); longer: not harvested
_MAX_STRING_STARTS = 32  # `X` bytes tried as the string's opcode before giving up
_MAX_PUT_TRIES = 16  # payload bytes that look like the PUT, skipped before giving up


def memo_gets(piece: bytes) -> set[int]:
    """Every memo slot `piece` may read (with false positives from payload bytes)."""
    import numpy as np  # here: only big flight-recorder jobs cut pickles into pieces

    raw = np.frombuffer(piece, dtype=np.uint8)
    after_h = raw[np.flatnonzero(raw[:-1] == ord("h")) + 1]  # `h` is in text too: vectorised
    slots = set(np.unique(after_h).tolist())
    slots.update(int.from_bytes(four, "little") for four in _LONG_BINGETS.findall(piece))
    return slots


class SearchBudgetSpent(PickleError):
    """Finding the memo strings a piece needs would cost more than reading the whole pickle."""


_MAX_WANTED = 4096  # memo slots a piece may need (a real dump's last entries need ~40)


def memo_strings(
    data: bytes, slots: set[int], end: int, *, budget: int | None = None
) -> dict[int, str]:
    """The strings that protocol-2 pickle `data[:end]` puts into memo `slots`.

    A writer puts each slot once, right after the object: for a string, BINUNICODE (`X`,
    4-byte length, UTF-8) followed by BINPUT (`q`, 1-byte slot) or LONG_BINPUT (`r`, 4-byte
    slot). Each slot's PUT is found by its bytes and checked by the string that must end right
    before it; slots holding anything else, or not found, are left out (a piece that needs one
    then fails to load, and the caller reads the whole pickle).

    The searches are bounded: `budget` bytes searched in all (default: four times the
    pickle, which a real dump's few dozen slots never come near). A slot holding a container
    costs a search to the end, so a crafted piece naming thousands of them could take minutes
    where the whole read takes a second: past the budget, or past `_MAX_WANTED` slots, this
    raises SearchBudgetSpent and the caller reads the whole pickle instead.
    """
    if len(slots) > _MAX_WANTED:
        raise SearchBudgetSpent(f"a piece naming {len(slots)} memo slots is read whole")
    left = 4 * len(data) + (1 << 20) if budget is None else budget
    found: dict[int, str] = {}
    # Writers number slots in the order they write them: slot n is PUT after slot n-1, and
    # slots below 256 (BINPUT) before slot 256's LONG_BINPUT. Searching from the last slot
    # found keeps a slot whose PUT is not found from costing a search of the whole pickle.
    long_from = data.find(b"r\x00\x01\x00\x00", 0, end)
    short_end = end if long_from < 0 else long_from
    left -= end if long_from < 0 else long_from
    after = 0
    for slot in sorted(slots):
        put = b"q" + bytes((slot,)) if slot < 256 else b"r" + slot.to_bytes(4, "little")
        limit = short_end if slot < 256 else end
        at = data.find(put, after, limit)
        left -= (at if at >= 0 else limit) - after
        tries = 0
        while at > 0 and tries < _MAX_PUT_TRIES:
            text, cost = _string_ending_at(data, at)
            left -= cost
            if text is not None:
                found[slot] = text
                after = at
                break
            start = at + 1
            at = data.find(put, start, limit)
            left -= (at if at >= 0 else limit) - start
            tries += 1
        if left < 0:
            raise SearchBudgetSpent("finding the piece's memo strings would cost too much")
    return found


_MAX_DICT = 16384  # longest memoized dict looked for (a frame: name, file, line)
_MAX_DICT_STARTS = 16  # `}(` candidates tried for one dict before giving up


@overload
def memo_definitions(
    data: bytes,
    slots: set[int],
    end: int,
    *,
    budget: int | None = ...,
    located: Literal[False] = ...,
) -> list[tuple[int, bytes]]: ...


@overload
def memo_definitions(
    data: bytes, slots: set[int], end: int, *, budget: int | None = ..., located: Literal[True]
) -> list[tuple[int, int, bytes]]: ...


def memo_definitions(
    data: bytes,
    slots: set[int],
    end: int,
    *,
    budget: int | None = None,
    located: bool = False,
) -> list[tuple[int, bytes]] | list[tuple[int, int, bytes]]:
    """The opcodes that define memo `slots` in protocol-2 pickle `data[:end]`, and those of
    every slot they refer to in turn: `(slot, opcodes)` in the order the pickle wrote them.

    torch's C++ pickler memoizes strings by value and, of containers, only those held twice:
    in a flight-recorder dump the frame dicts that entries share (BINPUT right after their
    SETITEMS). A slot's PUT is found by its bytes; a string is the BINUNICODE ending right
    before it, a dict the nearest `EMPTY_DICT MARK` before its SETITEMS whose opcodes scan
    cleanly (a flat frame dict of names, paths and numbers). Slots holding anything else, or
    not found, are left out: a piece that needs one fails to load and the caller reads the
    whole pickle. Slots are numbered in the order they are written, so the first slot not
    found before `end` ends the search: every higher one is defined after it. Bounded like
    `memo_strings`: past `budget` bytes searched (default four times the pickle) or
    `_MAX_WANTED` slots, SearchBudgetSpent.
    """
    left = [4 * len(data) + (1 << 20) if budget is None else budget]
    found: dict[int, tuple[int, bytes]] = {}
    wanted = set(slots)
    # BINPUT slots (< 256) are all written before slot 256's LONG_BINPUT: found once
    long_from = -1
    if wanted and min(wanted) < 256:
        long_from = data.find(b"r\x00\x01\x00\x00", 0, end)
        left[0] -= end if long_from < 0 else long_from
    short_end = end if long_from < 0 else long_from
    while wanted:
        if len(found) + len(wanted) > _MAX_WANTED:
            raise SearchBudgetSpent(f"a piece naming {len(found) + len(wanted)} memo slots")
        more: set[int] = set()
        for slot, (at, raw) in _definitions(data, wanted, end, short_end, left).items():
            found[slot] = (at, raw)
            if raw[:1] == b"}":  # a dict names the strings (and frames) it holds by memo
                more |= {s for s in memo_gets(raw) if s < slot and s not in found}
        wanted = more - found.keys()
    ordered = sorted(found.items(), key=lambda kv: kv[1][0])
    if located:  # where each starts too: a caller merging several searches keeps their order
        return [(slot, at, raw) for slot, (at, raw) in ordered]
    return [(slot, raw) for slot, (at, raw) in ordered]


def _definitions(
    data: bytes, slots: set[int], end: int, short_end: int, left: list[int]
) -> dict[int, tuple[int, bytes]]:
    """One round of `memo_definitions`: slot -> (where its object starts, its opcodes)."""
    found: dict[int, tuple[int, bytes]] = {}
    after = 0
    for slot in sorted(slots):
        put = b"q" + bytes((slot,)) if slot < 256 else b"r" + slot.to_bytes(4, "little")
        limit = short_end if slot < 256 else end
        at = data.find(put, after, limit)
        left[0] -= (at if at >= 0 else limit) - after
        tries = 0
        while at > 0 and tries < _MAX_PUT_TRIES:
            span, cost = _object_at(data, at, len(put))
            left[0] -= cost
            if span is not None:
                found[slot] = (span[0], data[span[0] : span[1]])
                after = at
                break
            begin = at + 1
            at = data.find(put, begin, limit)
            left[0] -= (at if at >= 0 else limit) - begin
            tries += 1
        if left[0] < 0:
            raise SearchBudgetSpent("finding the piece's memo objects would cost too much")
        if slot not in found:
            break  # written after `end` (or not an object looked for): so is every later slot
    return found


def _object_at(data: bytes, put: int, put_len: int) -> tuple[tuple[int, int] | None, int]:
    """The opcodes `(start, stop)` of the string or flat dict the PUT at `put` memoizes (or
    None), and the bytes searched. Strings and torch's dicts end right before their PUT;
    Python's pickler puts a dict's PUT right after its EMPTY_DICT, before the items."""
    text, cost = _string_ending_at(data, put)
    if text is not None:
        return (put - 5 - len(text.encode("utf-8", "surrogatepass")), put), cost
    if data[put - 1 : put] == b"}":  # Python's layout: `}` PUT `(` items `u`
        start, stop = put - 1, put + put_len
        if data[stop : stop + 1] != b"(":
            return None, cost
        highest = min(len(data), stop + _MAX_DICT)
        end = data.find(b"u", stop, highest)
        for _ in range(_MAX_DICT_STARTS):
            if end < 0:
                return None, cost + highest - stop
            if _scans_exactly(data, start, end + 1):
                return (start, end + 1), cost + end - start
            end = data.find(b"u", end + 1, highest)
        return None, cost + highest - stop
    if data[put - 1 : put] != b"u":  # a torch dict's opcodes end with its SETITEMS
        return None, cost
    lowest = max(put - _MAX_DICT, 0)
    start = data.rfind(b"}(", lowest, put)
    cost += put - max(start, lowest)
    for _ in range(_MAX_DICT_STARTS):
        if start < 0:
            return None, cost
        cost += put - start
        if _scans_exactly(data, start, put):
            return (start, put), cost
        previous = start
        start = data.rfind(b"}(", lowest, start)
        cost += previous - max(start, lowest)
    return None, cost


def _scans_exactly(data: bytes, start: int, stop: int) -> bool:
    """Whether data[start:stop] is whole opcodes of plain data (no cut string, no call)."""
    try:
        return scan(b"\x80\x02" + data[start:stop] + b".", memo_bound=len(data)) == stop - start + 3
    except PickleError:
        return False


def _string_ending_at(data: bytes, end: int) -> tuple[str | None, int]:
    """The BINUNICODE string whose payload ends at `end` (or None), and the bytes searched."""
    lowest = max(end - 5 - _MAX_STRING, 0)
    start = data.rfind(b"X", lowest, end - 4)
    cost = end - 4 - max(start, lowest)
    for _ in range(_MAX_STRING_STARTS):
        if start < 0:
            return None, cost
        if int.from_bytes(data[start + 1 : start + 5], "little") == end - start - 5:
            try:
                return data[start + 5 : end].decode("utf-8", "surrogatepass"), cost
            except UnicodeDecodeError:
                return None, cost
        previous = start
        start = data.rfind(b"X", lowest, start)
        cost += previous - max(start, lowest)
    return None, cost
