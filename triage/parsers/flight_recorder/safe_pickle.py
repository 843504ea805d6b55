"""A restricted unpickler for untrusted flight-recorder dumps.

Loading a pickle with `pickle.load` runs whatever callables it names (`os.system` via
`__reduce__`, `builtins.exec` via GLOBAL). Flight-recorder dumps come from other people's
machines, so this module only ever builds plain data: dict, list, tuple, str, bytes, int,
float, bool and None.

Two layers, so one mistake does not open the door:

1. `scan()` walks the opcode stream *before* anything is built and refuses every opcode that
   could import or call (GLOBAL, STACK_GLOBAL, INST, OBJ, NEWOBJ, NEWOBJ_EX, REDUCE, BUILD,
   EXT1/2/4, PERSID, BINPERSID) or build anything but plain data (sets, bytearrays, out-of-band
   buffers). It also bounds what the C unpickler would allocate: memo indices (a tiny pickle
   with `LONG_BINPUT 1000000000` makes CPython's unpickler zero-fill a 16 GB memo table),
   declared lengths (a FRAME's is read at once), huge integers, and the input size itself.
2. The C unpickler then loads the bytes with a `find_class` that refuses everything and no
   persistent-id hook, so even an opcode that slipped past the scan cannot reach a callable.

The second layer alone stops code, not memory: CPython's `_pickle.c` grows the memo to twice
an explicit PUT / LONG_BINPUT index and zero-fills it, and only the scan knows which bytes
are opcodes (the byte of LONG_BINPUT, `r`, is in every dump's names and timestamps). So the
scan stays, made cheap, and big jobs load less (`tail`). Where a crash or a hang of the
process costs only the dump (`triage.isolated`'s child, a pool worker), `loads_contained`
loads first under an address-space limit, so a memo bomb is a MemoryError, and scans only
to say why a load failed or why what it built is not a dump's data.

The scan runs at C speed for nearly every opcode: one compiled regex eats runs of fixed-width
opcodes, short strings, 64-bit integers and in-range memo puts, and the Python loop only
sees long strings, big integers, high memo indices, FRAMEs and the end (a 330 KB,
148k-opcode 2,000-entry dump at protocol 4 scans in ~1.7 ms; its C unpickling takes ~3.5).

Every failure is a `PickleRefused` (the input tried something forbidden or exceeded a bound) or
a `PickleCorrupt` (truncated or malformed); both carry a message a user can read.
"""

from __future__ import annotations

import functools
import pickle
import pickletools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

try:
    import resource
except ImportError:  # not on Windows: the scan always runs there (`loads_contained`'s callers)
    resource = None  # type: ignore[assignment]

from triage import regex_cache

__all__ = [
    "DEFAULT_LIMITS",
    "Limits",
    "PickleCorrupt",
    "PickleError",
    "PickleRefused",
    "load",
    "loads",
    "loads_contained",
    "loads_continued",
    "loads_piece",
    "loads_prefix",
    "scan",
]


class PickleError(Exception):
    """The pickle could not be loaded safely; the message says why."""


class PickleRefused(PickleError):
    """The pickle asks for something a data-only loader must not do (import, call, bloat)."""


class PickleCorrupt(PickleError):
    """The pickle is truncated or malformed."""


class MemoMissing(PickleCorrupt):
    """A piece refers to a memo slot nothing given defines (`slot`); `defined`: the slots it
    was given, where that is a count (`loads_continued`)."""

    def __init__(self, message: str, slot: int, defined: int | None = None) -> None:
        super().__init__(message)
        self.slot = slot
        self.defined = defined


@dataclass(frozen=True)
class Limits:
    """Bounds on what an untrusted pickle may make us allocate."""

    # A 2,000-entry dump with Python stacks is ~0.3-2 MB; C++ stacks can make it ~10x larger.
    max_bytes: int = 256 * 1024 * 1024
    # Every object costs at least one opcode byte, so this also bounds the object count.
    max_items: int = 50_000_000
    # Flight-recorder data is at most ~5 levels deep; 64 leaves room for other plain data.
    max_depth: int = 64
    # Integers wider than this (in bytes) have no business in a trace and are slow to print.
    max_int_bytes: int = 64


DEFAULT_LIMITS = Limits()

# Opcodes that import a global, call something or touch an object's state: the ways a pickle
# runs code. Also refused: containers and buffers outside the plain-data set we promise.
_FORBIDDEN = {
    "GLOBAL": "imports a global",
    "STACK_GLOBAL": "imports a global",
    "INST": "imports and calls a class",
    "OBJ": "calls a class",
    "NEWOBJ": "calls a class's __new__",
    "NEWOBJ_EX": "calls a class's __new__",
    "REDUCE": "calls a callable",
    "BUILD": "sets an object's state",
    "EXT1": "imports a registered extension",
    "EXT2": "imports a registered extension",
    "EXT4": "imports a registered extension",
    "PERSID": "asks for a persistent object",
    "BINPERSID": "asks for a persistent object",
    "EMPTY_SET": "builds a set",
    "ADDITEMS": "builds a set",
    "FROZENSET": "builds a frozenset",
    "BYTEARRAY8": "builds a bytearray",
    "NEXT_BUFFER": "needs an out-of-band buffer",
    "READONLY_BUFFER": "needs an out-of-band buffer",
}

# pickletools knows every opcode's argument layout; derive the scanner's tables from it.
_FIXED: dict[int, int] = {}  # opcode byte -> fixed argument width
_COUNTED: dict[int, tuple[int, bool]] = {}  # opcode -> (width of the length field, signed)
_LINE: set[int] = set()  # argument runs to the next newline (protocol 0)
_NAMES: dict[int, str] = {}
for _op in pickletools.opcodes:
    _code = ord(_op.code)
    _NAMES[_code] = _op.name
    if _op.name in _FORBIDDEN:
        continue
    _n = _op.arg.n if _op.arg is not None else 0
    if _n >= 0:
        _FIXED[_code] = _n
    elif _n == pickletools.UP_TO_NEWLINE:
        _LINE.add(_code)
    elif _n == pickletools.TAKEN_FROM_ARGUMENT1:
        _COUNTED[_code] = (1, False)
    elif _n == pickletools.TAKEN_FROM_ARGUMENT4:
        _COUNTED[_code] = (4, True)
    elif _n == pickletools.TAKEN_FROM_ARGUMENT4U:
        _COUNTED[_code] = (4, False)
    elif _n == pickletools.TAKEN_FROM_ARGUMENT8U:
        _COUNTED[_code] = (8, False)

_STOP = ord(".")
_LONG_BINPUT = ord("r")
_PUT = ord("p")
_BINGET, _LONG_BINGET, _GET = ord("h"), ord("j"), ord("g")
_FRAME = 0x95
_LONG_OPS = {ord("\x8a"), ord("\x8b"), ord("L")}  # LONG1, LONG4, LONG (text)
_TEXT_INTS = {ord("L"), ord("I")}  # LONG and INT as decimal text: any number of digits
_LONG1 = 0x8A
# Short counted strings the regex reads itself: (opcode, width of the length field).
_SHORT_STRINGS = ((ord("X"), 4), (0x8C, 1), (ord("C"), 1), (ord("U"), 1))
_SHORT_STRING_MAX = 127  # longer strings are rare in a dump; the Python loop reads them
_LONG1_MAX = 9  # a 64-bit timestamp needs 8 bytes (9 with the sign byte)

# Fixed-width opcodes needing no check run through the regex; STOP, LONG_BINPUT and the memo
# gets stay out of this table (each gets its own, possibly bounded, branch), and FRAME (a few
# a dump), whose length the loop checks.
_RUN_WIDTHS: dict[int, list[int]] = {}
for _code, _width in _FIXED.items():
    if _code not in (_STOP, _LONG_BINPUT, _BINGET, _LONG_BINGET, _FRAME):
        _RUN_WIDTHS.setdefault(_width, []).append(_code)
# A dump's opcodes with an argument, most frequent first: the regex tries its branches in
# order, so BINGET (~40% of a dump's opcodes) is matched by the first.
_FREQUENT = [ord(c) for c in "MJKG"]  # BININT2, BININT, BININT1, BINFLOAT


def _byte(code: int) -> bytes:
    return re.escape(bytes([code]))


def _class(codes: list[int]) -> bytes:
    return b"[" + b"".join(_byte(c) for c in sorted(codes)) + b"]"


def _below(bits: int, width: int = 4) -> bytes:
    """A regex for a `width`-byte little-endian unsigned integer below 2**bits."""
    if bits >= 8 * width:
        return b"." * width
    byte, rest = divmod(bits, 8)  # `byte` whole free bytes, then one byte below 2**rest
    top = b"[" + _byte(0) + b"-" + _byte((1 << rest) - 1) + b"]"
    return b"." * byte + top + b"\x00" * (width - 1 - byte)


def _counted(code: int, width: int, longest: int) -> bytes:
    """A regex for opcode `code` with a `width`-byte length field of at most `longest`."""
    branches = [
        _byte(length) + b"\x00" * (width - 1) + (b".{%d}" % length if length else b"")
        for length in range(longest, -1, -1)  # longest first: LONG1 timestamps are 8 bytes
    ]
    return _byte(code) + b"(?:" + b"|".join(branches) + b")"


@functools.lru_cache(maxsize=64)
def _fast_run(memo_bits: int, long_bytes: int, get_bits: int = 32) -> re.Pattern[bytes]:
    """One compiled regex that eats a run of opcodes needing no check beyond their shape.

    Fixed-width opcodes, short strings (the length byte picks a branch of exactly that
    many payload bytes, so payload bytes are never read as opcodes), LONG1 up to
    `long_bytes` bytes, LONG_BINPUT below `2**memo_bits` and memo gets below `2**get_bits`.
    Anything else stops the run and the Python loop in `scan` decides. Each opcode byte
    starts exactly one branch, so the order of the branches changes the speed, never what
    is read. Argument-less opcodes are eaten by a character class (a tight loop in sre),
    the group iterates once per opcode with an argument: 1.7 ms for a 148k-opcode dump,
    against 3.2 ms for one iteration per opcode. The possessive `*+` keeps no backtracking.
    """
    # get_bits < 0: no memo get is allowed at all; the loop refuses each
    gets = [_byte(_BINGET) + _below(get_bits, 1), _byte(_LONG_BINGET) + _below(get_bits)]
    if get_bits < 0:
        gets = []
    alternatives = gets[:1]
    if long_bytes >= 0:
        alternatives.append(_counted(_LONG1, 1, long_bytes))
    alternatives += [_byte(c) + b"." * _FIXED[c] for c in _FREQUENT]
    alternatives += gets[1:]
    alternatives.append(_byte(_LONG_BINPUT) + _below(memo_bits))
    for width, codes in sorted(_RUN_WIDTHS.items()):
        rest = [c for c in codes if c not in _FREQUENT]
        if width and rest:
            alternatives.append(_class(rest) + b"." * width)
    alternatives += [_counted(c, w, _SHORT_STRING_MAX) for c, w in _SHORT_STRINGS]
    bare = _class(_RUN_WIDTHS[0]) + b"*+"
    pattern = b"(?:" + bare + b"(?:" + b"|".join(alternatives) + b"))*+" + bare
    return regex_cache.compile_std(pattern, re.DOTALL)


def _name(code: int) -> str:
    return _NAMES.get(code, f"unknown opcode 0x{code:02x}")


def scan(
    data: bytes,
    limits: Limits = DEFAULT_LIMITS,
    *,
    memo_bound: int | None = None,
    get_bound: int | None = None,
    cut_frames: list[int] | None = None,
) -> int:
    """Check that `data` is a data-only pickle within `limits`; return its length up to STOP.

    Memo slots may be numbered up to `memo_bound` (default: the input length); a piece cut
    from a bigger pickle passes the whole pickle's length. `get_bound`: memo slots below it
    are the only ones the pickle may read (a piece whose later slots are numbered otherwise
    than in the pickle it was cut from); a read of another is a MemoMissing naming the slot.
    `cut_frames`: a list for the places of the FRAMEs that run past the input (a pickle
    cut from another: see `loads_continued`), which are then no error. Raises
    PickleRefused for a forbidden opcode or a bound
    exceeded, PickleCorrupt for truncation or an unknown opcode.
    """
    n = len(data)
    bound = n if memo_bound is None else min(memo_bound, limits.max_bytes)
    if n > limits.max_bytes:
        raise PickleRefused(f"pickle is {n} bytes, over the {limits.max_bytes}-byte limit")
    if n > limits.max_items:
        # Each opcode builds at most one object and takes at least one byte.
        raise PickleRefused(f"pickle could hold over {limits.max_items} objects")
    pos = 0
    # LONG_BINPUT indices below the largest power of two <= n pass inside the regex; the
    # loop checks the rest exactly (index <= n). Memo gets likewise against `get_bound`.
    get_bits = 32 if get_bound is None else get_bound.bit_length() - 1
    longest = min(_LONG1_MAX, limits.max_int_bytes)
    run = _fast_run(max(bound.bit_length() - 1, 0), longest, min(get_bits, 32)).match
    while True:
        pos = run(data, pos).end()
        if pos >= n:
            raise PickleCorrupt(f"pickle is truncated: no STOP opcode within {n} bytes")
        code = data[pos]
        pos += 1
        if code == _STOP:
            return pos
        if code == _LONG_BINPUT:
            if pos + 4 > n:
                raise PickleCorrupt(f"pickle is truncated at byte {pos}")
            index = int.from_bytes(data[pos : pos + 4], "little")
            # A legitimate writer numbers memo slots from 0, one per object; an index beyond
            # the input length only serves to make the unpickler allocate a huge memo table.
            if index > bound:
                raise PickleRefused(
                    f"pickle asks for memo slot {index} at byte {pos - 1}, "
                    f"more than a {bound}-byte pickle can fill"
                )
            pos += 4
            continue
        if code == _FRAME:
            if pos + 8 > n:
                raise PickleCorrupt(f"pickle is truncated at byte {pos}")
            length = int.from_bytes(data[pos : pos + 8], "little")
            pos += 8
            # CPython's unpickler reads a whole frame at once, asking the stream for its
            # declared length: a frame longer than the input would allocate that much first
            if length > n - pos:
                if cut_frames is None:
                    raise PickleCorrupt(
                        f"pickle is truncated or corrupt: FRAME at byte {pos - 9} claims "
                        f"{length} bytes but only {n - pos} remain"
                    )
                cut_frames.append(pos - 9)
            continue
        if get_bound is not None and code in (_BINGET, _LONG_BINGET):
            width = 1 if code == _BINGET else 4
            if pos + width > n:
                raise PickleCorrupt(f"pickle is truncated at byte {pos}")
            _check_get(int.from_bytes(data[pos : pos + width], "little"), get_bound, pos - 1)
            pos += width
            continue
        counted = _COUNTED.get(code)
        if counted is not None:
            width, signed = counted
            if pos + width > n:
                raise PickleCorrupt(f"pickle is truncated at byte {pos}")
            length = int.from_bytes(data[pos : pos + width], "little", signed=signed)
            pos += width
            if length < 0 or pos + length > n:
                raise PickleCorrupt(
                    f"pickle is truncated or corrupt: {_name(code)} at byte {pos - width - 1} "
                    f"claims {length} bytes but only {n - pos} remain"
                )
            if code in _LONG_OPS and length > limits.max_int_bytes:
                raise PickleRefused(f"integer of {length} bytes at byte {pos - width - 1}")
            pos += length
            continue
        if code in _LINE:
            end = data.find(b"\n", pos)
            if end < 0:
                raise PickleCorrupt(f"pickle is truncated inside {_name(code)} at byte {pos - 1}")
            arg = data[pos:end]
            if code == _PUT:
                if not arg.isdigit() or len(arg) > 12 or int(arg) > bound:
                    raise PickleRefused(f"pickle asks for memo slot {arg[:20]!r} at byte {pos - 1}")
            elif code == _GET and get_bound is not None:
                # read as the unpickler reads it; anything but a short number is corrupt
                slot = int(arg) if arg.isdigit() and len(arg) <= 12 else -1
                _check_get(slot, get_bound, pos - 1)
            elif code in _TEXT_INTS and len(arg) > 2 * limits.max_int_bytes + 2:
                raise PickleRefused(f"integer of {len(arg)} digits at byte {pos - 1}")
            pos = end + 1
            continue
        if code in _FIXED:  # a fixed opcode cut short by the end of the input
            raise PickleCorrupt(f"pickle is truncated inside {_name(code)} at byte {pos - 1}")
        name = _name(code)
        why = _FORBIDDEN.get(name)
        if why is not None:
            raise PickleRefused(
                f"pickle opcode {name} at byte {pos - 1} {why}; refused because flight-recorder "
                "dumps are plain data and an untrusted pickle could run code"
            )
        raise PickleCorrupt(f"not a valid pickle: {name} at byte {pos - 1}")


def _check_get(slot: int, get_bound: int, at: int) -> None:
    if not 0 <= slot < get_bound:
        raise MemoMissing(
            f"pickle piece reads memo slot {slot} at byte {at}; only slots below {get_bound} "
            "are numbered as in the pickle it was cut from",
            slot,
            get_bound,
        )


class _DataOnlyUnpickler(pickle.Unpickler):
    """The C unpickler with every route to a callable closed."""

    def find_class(self, module: str, name: str) -> Any:
        raise PickleRefused(f"pickle wants to import {module}.{name}; refused")

    def persistent_load(self, pid: Any) -> Any:
        raise PickleRefused("pickle asks for a persistent object; refused")


def _children(item: Any) -> list[Any]:
    values = [*item.values(), *item.keys()] if type(item) is dict else item
    return [c for c in values if type(c) is dict or type(c) is list or type(c) is tuple]


def _check_depth(obj: Any, limits: Limits) -> None:
    """Refuse cycles and nesting deeper than `limits.max_depth`, without recursing.

    Memo references make the data a graph: the longest path counts, not the depth at which a
    shared container is first met, so heights are computed bottom-up, each container once.
    """
    height: dict[int, int] = {}  # id -> levels from here down (finished containers)
    on_path: set[int] = set()
    stack: list[tuple[Any, list[Any]]] = [(obj, _children(obj))]
    on_path.add(id(obj))
    while stack:
        item, pending = stack[-1]
        if pending:
            child = pending.pop()
            key = id(child)
            if key in height:
                continue
            if key in on_path:
                raise PickleRefused("pickle refers to itself (a cycle); plain data has none")
            if len(stack) >= limits.max_depth:
                raise PickleRefused(f"pickle nests deeper than {limits.max_depth} levels")
            on_path.add(key)
            stack.append((child, _children(child)))
            continue
        stack.pop()
        on_path.discard(id(item))
        below = [height[id(c)] for c in _children(item)]
        height[id(item)] = 1 + max(below, default=0)
        if len(stack) + height[id(item)] > limits.max_depth:
            raise PickleRefused(f"pickle nests deeper than {limits.max_depth} levels")


def loads(data: bytes, limits: Limits = DEFAULT_LIMITS, *, check_depth: bool = True) -> Any:
    """Load an untrusted pickle as plain data, or raise PickleError saying why not.

    `check_depth=False` skips the nesting walk (about half the load time of a big dump); only
    for callers that read known fields at known depths and never recurse into the data.
    """
    obj = _unpickle(data, scan(data, limits))
    if check_depth and type(obj) in (dict, list, tuple):
        _check_depth(obj, limits)
    return obj


def loads_contained(data: bytes, memory: int, limits: Limits = DEFAULT_LIMITS) -> Any:
    """`loads(data, limits, check_depth=False)` for a process whose crash or hang costs only
    the dumps it decodes (`triage.isolated`'s child, a pool worker): the C unpickler loads
    first, under an address-space limit of `memory` bytes more than the process holds, and
    the scan runs only when the load fails, to say why as `loads` says it.

    What the scan would refuse and the load still builds is plain data within that limit: no
    code runs (every global is refused; without one, nothing on the stack can be called or
    given state), a length past the input's end fails the read or its allocation, and a memo
    bomb fails as a MemoryError. Left to the caller: sets, bytearrays and integers over
    `limits.max_int_bytes` come back as values (`scan` says whether it would refuse them).
    """
    if len(data) > limits.max_bytes:
        raise PickleRefused(f"pickle is {len(data)} bytes, over the {limits.max_bytes}-byte limit")
    try:
        with _address_space(memory):
            return _load(_unpickler(data))
    except PickleError:
        scan(data, limits)  # raises the scan's reason, where it finds one
        raise


@contextmanager
def _address_space(extra: int) -> Iterator[None]:
    """This process limited to `extra` bytes of address space more than it holds (Linux;
    elsewhere, or where the limit is already lower, as it is)."""
    if resource is None:
        yield
        return
    try:
        with open("/proc/self/statm", "rb") as statm:
            held = int(statm.read().split()[0]) * resource.getpagesize()
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError, IndexError):
        yield
        return
    limit = held + extra
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft != resource.RLIM_INFINITY and soft <= limit:
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def loads_prefix(data: bytes, limits: Limits = DEFAULT_LIMITS) -> tuple[Any, Memo]:
    """`loads(data, check_depth=False)`, and the memo the load left: what a piece cut from
    later in the same pickle may refer to (`loads_piece(..., known=...)`). `data` must end
    with its STOP; a FRAME it cuts short is read as `loads_continued` reads it."""
    cut: list[int] = []
    end = scan(data, limits, cut_frames=cut)
    unpickler = _unpickler(_frames_trimmed(_whole(data, end), cut))
    return _load(unpickler), Memo(unpickler)


def loads_continued(
    first: bytes, then: bytes, memo_bound: int, limits: Limits = DEFAULT_LIMITS
) -> tuple[Any, Any]:
    """Load two pickles cut from a bigger one as plain data, with no depth walk: `first`, its
    beginning (closed by its own STOP), then `then`, a piece from later in it that goes on
    with the memo `first` left, as one unpickler reads a stream of pickles.

    Protocol 4+ numbers memo slots by counting MEMOIZEs, so `then`'s own slots are numbered
    right after `first`'s where the bigger pickle numbers them after everything between the
    two: `then` may read only the slots `first` defined, counted after it is loaded and
    checked exactly by the scan of `then` (a read of another is a MemoMissing naming the
    slot). Slots may be put up to `memo_bound`, the bigger pickle's length. A FRAME `first`
    cuts short is trimmed to its end: CPython's unpickler reads a whole frame at once and
    would read into `then`, and a frame's length changes nothing else it reads.
    """
    cut: list[int] = []
    end = scan(first, limits, cut_frames=cut)
    unpickler = _unpickler(_frames_trimmed(_whole(first, end), cut) + then)
    beginning = _load(unpickler)
    defined = Memo(unpickler).slots()
    if defined is None:
        raise PickleCorrupt("pickle numbers its memo slots with gaps: not cut")
    _whole(then, scan(then, limits, memo_bound=memo_bound, get_bound=defined))
    return beginning, _load(unpickler)


def _whole(data: bytes, end: int) -> bytes:
    if end != len(data):
        raise PickleCorrupt(f"pickle stops at byte {end} of {len(data)}: a part is misjoined")
    return data


def _frames_trimmed(data: bytes, frames: list[int]) -> bytes:
    """`data` with each FRAME at `frames` (as the scan found them) ending at its end."""
    if not frames:
        return data
    trimmed = bytearray(data)
    for at in frames:
        trimmed[at + 1 : at + 9] = (len(data) - at - 9).to_bytes(8, "little")
    return bytes(trimmed)


class Memo:
    """The memo an unpickler was left with after a safe load: the objects it holds were built
    from scanned opcodes by the restricted unpickler, so they are plain data. Handed to
    another unpickler through CPython's memo proxy, the one way in that copies the slots
    (assigning a dict to `Unpickler.memo` leaves the memo empty in CPython 3.11-3.13)."""

    def __init__(self, unpickler: pickle.Unpickler) -> None:
        self._proxy = unpickler.memo

    def give(self, unpickler: pickle.Unpickler) -> None:
        unpickler.memo = self._proxy

    def slots(self) -> int | None:
        """How many slots the memo holds when they are 0 to n-1 with no gap (as protocol 4+
        numbers them: MEMOIZE takes the next), else None."""
        held = self._proxy.copy()
        return len(held) if not held or max(held) == len(held) - 1 else None


def loads_piece(
    piece: bytes,
    memo: dict[int, str],
    memo_bound: int,
    limits: Limits = DEFAULT_LIMITS,
    *,
    definitions: list[tuple[int, bytes]] | None = None,
    known: Memo | None = None,
) -> Any:
    """Load opcodes cut from a bigger protocol-2 pickle as plain data (no depth walk).

    The piece's references to objects the bigger pickle defined before the cut come from
    `memo` (strings, as found by `memo_strings`) or `definitions` (the opcodes that built each
    slot's object, in the order the bigger pickle wrote them, as found by
    `memo_definitions`): they are written as opcodes ahead of the piece, so the result goes
    through the same scan as any pickle. `known`: a memo a safe load of the bigger pickle's
    beginning left (`loads_prefix`), the slots it holds defined before the piece is read.
    Memo slots may be numbered up to `memo_bound`, the bigger pickle's length. A reference
    nothing given holds is a MemoMissing naming the slot.
    """
    defined = b"".join(
        b"X%sr%s0" % (len(raw).to_bytes(4, "little") + raw, slot.to_bytes(4, "little"))
        for slot, raw in (
            (slot, text.encode("utf-8", "surrogatepass")) for slot, text in memo.items()
        )
    )
    if definitions:
        # each object's own opcodes, its PUT and a POP: the stack is as empty as before
        defined += b"".join(
            raw + b"r" + slot.to_bytes(4, "little") + b"0" for slot, raw in definitions
        )
    data = b"\x80\x02" + defined + piece
    end = scan(data, limits, memo_bound=memo_bound)
    unpickler = _unpickler(data[:end])
    if known is not None:
        known.give(unpickler)
    return _load(unpickler)


def _unpickler(data: bytes) -> pickle.Unpickler:
    # errors="replace": protocol-0/1 byte strings from Python 2 become str, never fail.
    return _DataOnlyUnpickler(_InMemory(data), encoding="utf-8", errors="replace")


class _InMemory:
    """`data` as the file the C unpickler reads: its first `peek` hands over every byte not
    yet read, which the unpickler then reads in place as `pickle.loads` reads bytes (no
    block copied into a buffer, no call per opcode). `read` and `readinto` only advance past
    what it consumed, or give what is left when a length runs past the end (a truncated
    pickle then fails on its own, as from bytes)."""

    __slots__ = ("_bytes", "_data", "_pos")

    def __init__(self, data: bytes) -> None:
        self._bytes = data
        self._data = memoryview(data)
        self._pos = 0

    def peek(self, _size: int = 0) -> memoryview:
        return self._data[self._pos :]

    def read(self, size: int = -1) -> memoryview:
        start = self._pos
        end = len(self._data) if size < 0 else min(len(self._data), start + size)
        self._pos = end
        return self._data[start:end]

    def readinto(self, buffer: Any) -> int:
        got = self.read(len(buffer))
        memoryview(buffer).cast("B")[: len(got)] = got
        return len(got)

    def readline(self) -> memoryview:
        end = self._bytes.find(b"\n", self._pos)
        return self.read(-1 if end < 0 else end + 1 - self._pos)


_MEMO_MISSING = re.compile(r"Memo value not found at index (\d+)")


def _unpickle(data: bytes, end: int) -> Any:
    return _load(_unpickler(data if end == len(data) else data[:end]))


def _load(unpickler: pickle.Unpickler) -> Any:
    try:
        return unpickler.load()
    except PickleError:
        raise
    except (EOFError, pickle.UnpicklingError) as exc:
        missing = _MEMO_MISSING.search(str(exc))
        if missing is not None:
            raise MemoMissing(f"pickle is corrupt: {exc}", int(missing[1])) from None
        raise PickleCorrupt(f"pickle is corrupt: {exc}") from None
    except MemoryError:
        raise PickleRefused("pickle needs more memory than is available") from None
    except Exception as exc:  # anything else the C unpickler throws on malformed input
        raise PickleCorrupt(f"pickle is malformed: {type(exc).__name__}: {exc}") from None


def load(stream: IO[bytes], limits: Limits = DEFAULT_LIMITS, *, check_depth: bool = True) -> Any:
    """Read at most `limits.max_bytes` (+1 to detect more) from `stream` and `loads` it."""
    data = stream.read(limits.max_bytes + 1)
    if len(data) > limits.max_bytes:
        raise PickleRefused(f"pickle is over the {limits.max_bytes}-byte limit")
    return loads(data, limits, check_depth=check_depth)
