"""Reading only the last entries of a big pickled dump, cut out of its bytes.

Even the C unpickler needs ~15 ms for a 2,000-entry dump, so 1,024 of them cannot be read
whole in seconds; a hang is decided at the end of the ring buffers, which is what the last
entries hold. The cut works on the protocol-2 layout torch writes, Python's at protocols 2-3, and
Python's at protocols 4-5 (framed, memo slots numbered by MEMOIZE); any other layout is read
whole by the caller.
"""

from __future__ import annotations

import re
from typing import Any

from triage.parsers.flight_recorder import pickle_memo, safe_pickle

__all__ = ["read_tail"]


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


def read_tail(data: bytes, keep: int) -> tuple[dict[str, Any], int] | None:
    """(the top-level dict with only the last `keep` entries, entries the dump holds), or
    None when the dump holds no more than `keep` entries or is not laid out as torch's
    pickler (or Python's, at protocols 2 to 5) writes it: the caller then reads it whole, so
    a wrong guess here costs time, never an answer.

    Two parts are loaded, each as a pickle of its own through the same safety scan: the
    beginning (the header and the first entries, closed by APPENDS and SETITEMS) and the piece
    from the first kept entry to the end. The piece's references to objects defined before
    it (strings, and in torch's layout the frame dicts entries share) come from the memo the
    beginning's load left, and those defined between the two from
    `pickle_memo.memo_definitions`, for exactly the slots the piece turns out to need.
    Protocols 4-5: see `_read_tail_framed`.
    """
    if data[:2] in (b"\x80\x04", b"\x80\x05"):
        return _read_tail_framed(data, keep)
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


# Protocols 4-5 (Python's pickler): memo slots are not written but numbered by MEMOIZE, one
# after each memoized object, and a FRAME opcode (9 bytes) may stand before any object.
_FRAME = rb"(?:\x95.{8})?"
_ENTRIES_KEY_FRAMED = re.compile(rb"\x8c\x07entries\x94" + _FRAME + rb"\]\x94\(", re.DOTALL)
# The first entry: EMPTY_DICT MEMOIZE MARK, its first key spelled out (SHORT_BINUNICODE
# MEMOIZE); later entries name that key by memo slot.
_FIRST_ENTRY_FRAMED = re.compile(_FRAME + rb"\}\x94\(" + _FRAME + rb"\x8c(.)", re.DOTALL)
_OPENING_FRAMED = b"}\x94("
_SPLIT_OPENING = re.compile(rb"\}\x94\(\x95.{8}", re.DOTALL)  # a frame began inside one
# Entries in the beginning of a protocol 4-5 dump: the kept ones may read only objects it
# defined, and a real loop's stacks and state names are all written within its first dozens
# of entries (a re-saved gloo dump of 200: within 32). Each costs ~2.5 us to load.
_PREFIX_ENTRIES_FRAMED = 64
# Beginnings tried, each longer, when the kept entries name an object first written after
# the one before (a stack first seen mid-buffer): each ends past where that object can be.
_LONGER_BEGINNINGS = 3


def _read_tail_framed(data: bytes, keep: int) -> tuple[dict[str, Any], int] | None:
    """`read_tail` for Python's protocols 4-5.

    The beginning (the header and the first entries) and the piece from the first kept
    entry on are read as two pickles by one unpickler, each through the same safety scan as
    any (`safe_pickle.loads_continued`). The piece's MEMOIZEs then number their slots right
    after the beginning's, where the dump numbers them after every entry in between; so the
    piece may read only slots the beginning defined (the keys, op and group names, the
    training loop's stacks), checked exactly by the scan. When it names a later one (a stack
    first seen mid-buffer), a longer beginning that holds it is tried; an object first
    written inside the piece itself makes the caller read the dump whole.
    """
    key = _ENTRIES_KEY_FRAMED.search(data)
    if key is None:
        return None
    first = _FIRST_ENTRY_FRAMED.match(data, key.end())
    if first is None:
        return None
    key_end = first.end() + data[first.end() - 1]
    if data[key_end : key_end + 1] != b"\x94":
        return None
    try:
        # the first entry's dict takes the slot after the header's last, its first key the
        # next: every later entry opens by naming that slot
        _, header = safe_pickle.loads_prefix(data[: key.end()] + b"eu.")
        before = header.slots()
        if before is None:
            return None
        slot = before + 1
        get = b"h" + bytes((slot,)) if slot < 256 else b"j" + slot.to_bytes(4, "little")
        opening = _OPENING_FRAMED + get
        split = [m.start() for m in _SPLIT_OPENING.finditer(data, key_end) if _names(data, m, get)]
        total = 1 + data.count(opening, key_end) + len(split)
        if total <= keep:
            return None
        cut = _nth_opening(data, opening, split, keep, key_end, backwards=True)
        if cut is None:
            return None
        begin = _nth_opening(data, opening, split, _PREFIX_ENTRIES_FRAMED, key_end) or cut
        for _ in range(_LONGER_BEGINNINGS + 1):
            begin = min(begin, cut)
            try:
                head, rest = safe_pickle.loads_continued(
                    data[:begin] + b"eu.", data[:2] + _PIECE_HEAD + data[cut:], len(data)
                )
                break
            except safe_pickle.MemoMissing as missing:
                if missing.defined is None:  # not the piece's scan: a corrupt beginning
                    return None
                begin = _past_slot(data, missing.slot, begin, missing.defined, opening, split, cut)
                if begin >= cut:  # first written in the kept piece: the dump is read whole
                    return None
        else:
            return None
    except safe_pickle.PickleError:
        return None
    if type(head) is not dict or type(rest) is not dict or type(rest.get("_")) is not list:
        return None
    entries = rest.pop("_")
    if len(entries) != keep or "entries" in rest:
        return None
    head.pop("entries", None)  # the first entries: only their memo was wanted
    return {**head, **rest, "entries": entries}, total


def _past_slot(
    data: bytes, slot: int, begin: int, defined: int, opening: bytes, split: list[int], cut: int
) -> int:
    """The first entry opening past where memo `slot` is likely written, or `cut`.

    Every slot is a MEMOIZE byte; before `begin` the dump holds `defined` slots, so its other
    MEMOIZE-valued bytes there are payload, and slot n is at or past the (n + 1 + that many)-th
    such byte. Payload bytes after `begin` put it later still: they are guessed at the rate
    seen before `begin`, with a margin (too long a beginning costs a little time; too short
    one more try, from there).
    """
    import numpy as np  # here: only a re-saved dump whose tail names a late object

    places = np.flatnonzero(np.frombuffer(data, dtype=np.uint8, count=cut) == 0x94)
    payload = max(int(np.count_nonzero(places < begin)) - defined, 0)
    guessed = int(1.5 * payload * max(slot - defined, 0) / max(defined, 1)) + 16
    nth = slot + payload + guessed
    if nth >= len(places):
        return cut
    later = _nth_opening(data, opening, split, 1, int(places[nth]))
    return cut if later is None else later


def _names(data: bytes, split: re.Match[bytes], get: bytes) -> bool:
    return data.startswith(get, split.end())


def _nth_opening(
    data: bytes, opening: bytes, split: list[int], n: int, lowest: int, backwards: bool = False
) -> int | None:
    """Where the n-th entry opening after `lowest` starts, counted from there or from the end
    (`backwards`): the plain openings merged with those a FRAME split (`split`, ascending).
    None if there are fewer."""
    pending = list(split) if backwards else split[::-1]  # pop() gives the next one to meet
    at = len(data) if backwards else lowest
    while n > 0:
        if backwards:
            found = data.rfind(opening, lowest, at)
            while pending and pending[-1] >= at:
                pending.pop()
            at = max(found, pending[-1] if pending else -1)
        else:
            found = data.find(opening, at + 1)
            while pending and pending[-1] <= at:
                pending.pop()
            near = [p for p in (found, pending[-1] if pending else -1) if p >= 0]
            at = min(near, default=-1)
        if at < 0:
            return None
        n -= 1
    return at


def _read_piece(data: bytes, cut: int, first_new: int, known: safe_pickle.Memo) -> Any:
    """The dict `_PIECE_HEAD` + data[cut:] makes, its references to slots defined before
    the cut taken from `known` or looked for (bounded: see `pickle_memo.memo_definitions`)."""
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
            found = pickle_memo.memo_definitions(data, {missing.slot}, cut, located=True)
            if not any(s == missing.slot for s, _, _ in found):
                raise
            defined.update((s, (at, raw)) for s, at, raw in found)
    # Many objects first written after the beginning: every slot the piece may name (a
    # superset: payload bytes that look like a GET count too), searched for in one go.
    wanted = {s for s in pickle_memo.memo_gets(piece) if s < first_new} - defined.keys()
    found = pickle_memo.memo_definitions(data, wanted, cut, located=True)
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
