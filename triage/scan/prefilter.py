"""A chunk's first test (`Prefilter`): a small caseless literal set that every line the hot-line
scan can report must contain, derived from that scan's own patterns.

The hot-line scan matches ~750 caseless needles and verdict patterns (~1 GB/s a core); most
chunks of a healthy training log hold none of them. The prefilter's literals are short pieces
shared by many needles (`error`, `nccl`, `memory`), each needle covered by at least one, and
each verdict pattern by a piece of every literal it requires (`triage.literals`); a pattern
with no literal known is kept whole. A scan of them stops at the first hit, so a chunk with no
hit is skipped at ~3 GB/s and any other costs a few bytes more than before.
"""

from __future__ import annotations

import hashlib
import heapq
import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

try:  # the stdlib regex parser, only to tell which patterns stay within a line
    from re import _constants as _sre_constants
    from re import _parser as _sre_parse
except ImportError:  # Python 3.10
    import sre_constants as _sre_constants  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

from triage import diskcache
from triage.literals import required_literals

# Pieces this long are shared by many needles; shorter ones would hit ordinary text
# (`err`), longer ones cover few needles each.
_PIECE_LENGTHS = (4, 5, 6)
# A verdict's literal shorter than this is no help: its pattern stays whole.
_MIN_LITERAL = 3


class Prefilter(NamedTuple):
    """`literals` (lower-case ASCII, scanned caseless) and `patterns` (scanned as they are):
    a line that holds none of them and matches none of them makes no event. `crossing`: the
    scan's patterns a match of which may span lines (not `line_local`)."""

    literals: tuple[bytes, ...]
    patterns: tuple[bytes, ...]
    crossing: tuple[bytes, ...] = ()

    def holds(self, text: bytes) -> bool:
        """Whether `text` holds a literal or matches a pattern (the check the tests run; the
        scan itself is one hyperscan database)."""
        low = text.lower()
        return any(lit in low for lit in self.literals) or any(
            re.search(p, text) for p in self.patterns
        )


def derive(
    needles: Iterable[bytes], patterns: Iterable[bytes], ordinary: Iterable[str] = ()
) -> Prefilter:
    """The prefilter of a scan for caseless `needles` (lower-case bytes) and `patterns`
    (case-sensitive byte regexes in the syntax hyperscan and `re` share). `ordinary` lines
    (healthy progress output) hold no piece chosen: a piece they hold would fire on every
    chunk. Kept in the disk cache (`triage.diskcache`): choosing the pieces costs ~0.2 s."""
    needles, patterns, ordinary = sorted(set(needles)), list(patterns), list(ordinary)
    h = hashlib.sha256()
    for part in (needles, patterns, [o.encode("utf-8", "replace") for o in ordinary]):
        h.update(b"\1".join(part) + b"\2")
    key = h.hexdigest()
    known = diskcache.section(_CACHE).get(key)
    if _valid(known):
        return Prefilter(*(tuple(x.encode("latin-1") for x in part) for part in known))
    found = _derive(needles, patterns, ordinary)
    diskcache.put(_CACHE, key, [[x.decode("latin-1") for x in part] for part in found])
    diskcache.save()
    return found


_CACHE = "scan-prefilter"


def _valid(known: object) -> bool:
    return (
        isinstance(known, list)
        and len(known) == 3
        and all(isinstance(part, list) and all(type(x) is str for x in part) for part in known)
    )


def _derive(needles: list[bytes], patterns: list[bytes], ordinary: list[str]) -> Prefilter:
    must_cover = {n.lower() for n in needles if n}
    kept: list[bytes] = []
    for pattern in patterns:
        literals = _literals(pattern)
        if literals is None:
            kept.append(pattern)
        else:
            must_cover.update(literals)
    plain = [line.lower().encode("utf-8", "replace") for line in ordinary]
    crossing = tuple(p for p in patterns if not line_local(p))
    return Prefilter(tuple(sorted(_cover(must_cover, plain))), tuple(kept), crossing)


def _literals(pattern: bytes) -> list[bytes] | None:
    """Lower-case literals one of which every match of `pattern` holds (ASCII case only is
    folded, as hyperscan's caseless flag does), or None when none is known."""
    found = required_literals(pattern.decode("latin-1"), _MIN_LITERAL)
    if found is None:
        return None
    return [lit.lstrip("\0").encode("latin-1").lower() for lit in found]


def _pieces(text: bytes) -> set[bytes]:
    return {text[i : i + k] for k in _PIECE_LENGTHS for i in range(len(text) - k + 1)}


def _cover(texts: set[bytes], ordinary: Sequence[bytes]) -> set[bytes]:
    """Pieces such that every text holds one: greedily the piece most uncovered texts share
    (the longer on a tie); a text no shared piece covers is a piece itself."""
    common = set().union(*map(_pieces, ordinary)) if ordinary else set()
    holders: dict[bytes, list[bytes]] = {}
    for text in texts:
        for piece in _pieces(text):
            if piece.isascii() and piece not in common:
                holders.setdefault(piece, []).append(text)
    left = set(texts)
    # a max-heap on (texts still uncovered that hold the piece, its length), updated lazily:
    # a popped entry whose count went down is pushed back with its count now
    heap = [(-len(h), -len(p), p) for p, h in holders.items() if len(h) > 1]
    heapq.heapify(heap)
    chosen: set[bytes] = set()
    while heap and left:
        count, length, piece = heapq.heappop(heap)
        now = sum(1 for t in holders[piece] if t in left)
        if now < 2:
            continue
        if now < -count:
            heapq.heappush(heap, (-now, length, piece))
            continue
        chosen.add(piece)
        left.difference_update(holders[piece])
    return chosen | left


def heads(pattern: bytes) -> list[bytes] | None:
    """Texts one of which every match of `pattern` (hyperscan's default flags) begins with:
    its leading literal text, one per branch of a leading group (`(?:Out of memory: |Memory
    cgroup out of memory: )Killed process`). None when a match may begin otherwise: a class, a
    repeat or an anchor before any literal, flags set inside a group, a branch with no text of
    its own, a pattern the stdlib parser cannot read."""
    try:
        tree = _sre_parse.parse(pattern.decode("latin-1"))
    except Exception:  # noqa: BLE001 - a construct `re` lacks: no head known
        return None
    found, _complete = _heads(list(tree))
    if not found or not all(found) or len(found) > _MAX_HEADS:
        return None
    return [head.encode("latin-1") for head in found]


# Past this many heads (nested branches multiply them) a pattern is taken to have none.
_MAX_HEADS = 64


def _heads(items: list[Any]) -> tuple[list[str], bool]:
    """The leading texts of `items` and whether they are all of it (no item was left over)."""
    c = _sre_constants
    found = [""]
    for op, arg in items:
        if op is c.LITERAL:
            found = [head + chr(arg) for head in found]
            continue
        if op is c.SUBPATTERN:
            _group, add, dele, sub = arg
            if add or dele:
                return found, False
            inner, complete = _heads(list(sub))
        elif op is c.BRANCH:
            inner, complete = [], True
            for branch in arg[1]:
                got, whole = _heads(list(branch))
                inner += got
                complete = complete and whole
        else:
            return found, False
        found = [head + more for head in found for more in inner]
        if len(found) > _MAX_HEADS or not complete:
            return found, False
    return found, True


def starts_covered(pattern: bytes, pieces: Iterable[bytes]) -> bool:
    """Whether every match of `pattern` begins with a text (`heads`) on one line that holds
    one of `pieces` (lower-case, found caseless). A match then begins on the line of a piece,
    at or after the line of a chunk's first prefilter hit, even where the match goes on over
    later lines: scanned from that line on, the chunk gives the same matches as scanned whole."""
    found = heads(pattern)
    if found is None:
        return False
    pieces = list(pieces)
    return all(
        b"\n" not in head and any(piece in head.lower() for piece in pieces) for head in found
    )


def line_local(pattern: bytes) -> bool:
    """Whether every match of `pattern` (hyperscan's default flags) lies within one line and
    does not depend on where the data starts: it then matches a chunk's lines from any line
    on as in the whole chunk. False where unsure (a pattern the stdlib parser cannot read)."""
    try:
        tree = _sre_parse.parse(pattern.decode("latin-1"))
    except Exception:  # noqa: BLE001 - a construct `re` lacks: assume the worst
        return False
    return _newline_free(list(tree), bool(tree.state.flags & re.DOTALL))


_NEWLINE = 10
# classes that hold `\n`: `\s`, `\D`, `\W`
_CROSSING = frozenset({"CATEGORY_SPACE", "CATEGORY_NOT_DIGIT", "CATEGORY_NOT_WORD"})


def _newline_free(items: list[Any], dotall: bool) -> bool:
    c = _sre_constants
    for op, arg in items:
        if op is c.LITERAL:
            ok = arg != _NEWLINE
        elif op is c.NOT_LITERAL:
            ok = arg == _NEWLINE
        elif op is c.ANY:
            ok = not dotall
        elif op is c.IN:
            ok = _class_free(arg)
        elif op is c.AT:
            ok = arg not in (c.AT_BEGINNING, c.AT_BEGINNING_STRING)
        elif op is c.SUBPATTERN:
            _group, add, _dele, sub = arg
            ok = _newline_free(list(sub), dotall or bool(add & re.DOTALL))
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT):
            ok = _newline_free(list(arg[2]), dotall)
        elif op is c.BRANCH:
            ok = all(_newline_free(list(branch), dotall) for branch in arg[1])
        elif op in (c.ASSERT, c.ASSERT_NOT):
            ok = _newline_free(list(arg[1]), dotall)
        else:  # a back reference, a conditional: assume the worst
            ok = False
        if not ok:
            return False
    return True


def _class_free(items: list[Any]) -> bool:
    """Whether a character class (`[...]`, `\\d`) cannot match `\\n`."""
    c = _sre_constants
    if items and items[0][0] is c.NEGATE:
        # a negated class misses `\n` only if it names it (`[^\n]`, `[^:\s]`)
        return any(
            (op is c.LITERAL and arg == _NEWLINE)
            or (op is c.CATEGORY and str(arg) == "CATEGORY_SPACE")
            or (op is c.RANGE and arg[0] <= _NEWLINE <= arg[1])
            for op, arg in items[1:]
        )
    for op, arg in items:
        if op is c.LITERAL and arg == _NEWLINE:
            return False
        if op is c.RANGE and arg[0] <= _NEWLINE <= arg[1]:
            return False
        if op is c.CATEGORY and str(arg) in _CROSSING:
            return False
        if op not in (c.LITERAL, c.RANGE, c.CATEGORY):
            return False
    return True
