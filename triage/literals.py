"""Literals that every match of a regex must contain: a cheap substring test that tells which
texts a pattern cannot match, before running it.

The rule engine (triage.classify.rules) and the correlate stage's cascade, launcher and exit
patterns (triage.analysis) run many patterns over every event of every rank; most events
contain none of a pattern's literals. A helper of both stages, so it belongs to neither.
"""

from __future__ import annotations

import re
from typing import Any

import regex

from triage import diskcache

try:  # the stdlib regex parser, only to find literals every match must contain
    from re import _constants as _sre_constants
    from re import _parser as _sre_parse
except ImportError:  # Python 3.10
    import sre_constants as _sre_constants  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

MIN_KEYWORD = 4
_REGEX_META = frozenset(".^$*+?{}[]\\|()")  # a pattern without these is plain text


def required_literals(pattern: str, min_len: int = MIN_KEYWORD) -> tuple[str, ...] | None:
    """`_required_literals`, kept in the disk cache between runs (start-up time)."""
    cache = diskcache.section("literals")
    key = f"{min_len}\0{pattern}"
    if key in cache:
        got = cache[key]
        if got is None:
            return None
        if isinstance(got, list) and all(type(x) is str for x in got):
            return tuple(got)
    found = _required_literals(pattern, min_len)
    diskcache.put("literals", key, None if found is None else list(found))
    return found


def _required_literals(pattern: str, min_len: int = MIN_KEYWORD) -> tuple[str, ...] | None:
    """Literals one of which every match of `pattern` contains, or None when none is known.

    Parsed with the stdlib regex parser; only literal runs that every match goes through count
    (nothing inside optional parts or classes). A top-level alternation yields one literal per
    branch, or None if a branch has none. Case-insensitive literals come back lowercased with a
    leading NUL (`"\0address already in use"`) and are tested against the lowercased text.
    Literals shorter than `min_len` do not count.
    """
    if not _REGEX_META.intersection(pattern):
        # plain text (a third of the shipped patterns): the whole pattern, without parsing it
        return (pattern,) if len(pattern) >= min_len else None
    try:
        tree = _sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - a `regex`-only construct: no prefilter for this pattern
        return None
    items, ci = list(tree), bool(tree.state.flags & re.IGNORECASE)
    # unwrap `(?i:...)` / `(?m:...)` / `(...)` around the whole pattern
    while len(items) == 1 and items[0][0] is _sre_constants.SUBPATTERN:
        _group, add, dele, sub = items[0][1]
        if dele:
            break
        ci = ci or bool(add & re.IGNORECASE)
        items = list(sub)
    if len(items) == 1 and items[0][0] is _sre_constants.BRANCH:
        out = []
        for branch in items[0][1][1]:
            lit = _longest_run(list(branch), ci, min_len)
            if lit is None:
                return None
            out.append(lit)
        return tuple(out)
    lit = _longest_run(items, ci, min_len)
    return (lit,) if lit is not None else None


def group_literals(pattern: str, min_len: int = MIN_KEYWORD) -> tuple[str, ...] | None:
    """Like `required_literals`, but also looks into a group every match goes through whose
    content is an alternation (`^.*?(?P<what>Killed|Aborted|Bus error)`): one literal per
    alternative of the first such group whose every alternative has one; else None."""
    found = required_literals(pattern, min_len)
    if found is not None:
        return found
    try:
        tree = _sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - a `regex`-only construct: no literals known
        return None
    ci = bool(tree.state.flags & re.IGNORECASE)
    for op, arg in tree:
        if op is not _sre_constants.SUBPATTERN or arg[2]:
            continue
        inner = list(arg[3])
        if len(inner) != 1 or inner[0][0] is not _sre_constants.BRANCH:
            continue
        group_ci = ci or bool(arg[1] & re.IGNORECASE)
        runs = [_longest_run(list(branch), group_ci, min_len) for branch in inner[0][1][1]]
        if all(runs):
            return tuple(r for r in runs if r)
    return None


def _longest_run(items: list[Any], ci: bool, min_len: int) -> str | None:
    best, run = "", []
    for op, arg in items:
        if op is _sre_constants.LITERAL:
            run.append(chr(arg))
            continue
        if op is _sre_constants.SUBPATTERN and not arg[2]:
            # a group that must match (named, plain or with flags): its own literal counts
            inner = _longest_run(list(arg[3]), ci or bool(arg[1] & re.IGNORECASE), min_len)
            if inner and len(inner.lstrip("\0")) > len(best.lstrip("\0")):
                best = inner
        if len(run) > len(best.lstrip("\0")):
            best = "".join(run)
            best = "\0" + best.lower() if ci else best
        run = []
    if len(run) > len(best.lstrip("\0")):
        best = "".join(run)
        best = "\0" + best.lower() if ci else best
    return best if len(best.lstrip("\0")) >= min_len else None


class Screened:
    """A case-insensitive pattern behind a substring test: every match contains one of its
    literals, so an ASCII text whose lowercase form contains none of them cannot match. Big
    jobs put thousands of lines through such alternations; most contain no literal."""

    __slots__ = ("literals", "pattern")

    def __init__(self, pattern: regex.Pattern[str]) -> None:
        self.pattern = pattern
        found = required_literals(f"(?i:{pattern.pattern})", min_len=1)
        # case-insensitive literals come back as "\0" + lowercase; ASCII ones compare exactly
        # with the lowercased ASCII text (no other character folds to an ASCII letter there)
        usable = (
            found is not None
            and bool(pattern.flags & regex.IGNORECASE)
            and all(lit.startswith("\0") and lit.isascii() for lit in found)
        )
        self.literals = tuple(lit[1:] for lit in found) if usable and found else None

    def search(self, text: str, lowered: str | None) -> regex.Match[str] | None:
        """`lowered` is `lowered_ascii(text)`."""
        if (
            lowered is not None
            and self.literals is not None
            and not any(lit in lowered for lit in self.literals)
        ):
            return None
        return self.pattern.search(text)


def lowered_ascii(text: str) -> str | None:
    """The text to screen with: lowercase when ASCII, else None (the regex decides alone)."""
    return text.lower() if text.isascii() else None
