"""A harvested message site and how its pieces become a template."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class _Field:
    """What the program fills in at run time (a masked format field)."""

    def __repr__(self) -> str:
        return "FIELD"


FIELD = _Field()
Piece = str | _Field


@dataclass(frozen=True)
class Found:
    """One message site in one file of one release."""

    parts: tuple[str, ...]  # literal chunks; a field the program fills in lies between two
    kind: str  # raise | assert | log | warn | check | throw
    type: str  # exception class, or the log level (error, warning, ...)
    file: str  # path inside the release, `/`-separated
    function: str  # enclosing `Class.function` (Python) or C++ function; "" at top level
    condition: str = ""  # the checked condition's source, shortened
    leading: bool = False  # a field comes before the first chunk
    trailing: bool = False  # a field comes after the last chunk


def found(
    pieces: Sequence[Piece], kind: str, type_: str, file: str, function: str, condition: str = ""
) -> Found | None:
    """The site, its literal pieces merged and its fields collapsed; None when no literal."""
    parts: list[str] = []
    leading = last_field = False
    pending = ""
    for piece in pieces:
        if isinstance(piece, str):
            if piece:
                pending += piece
                last_field = False
            continue
        if pending:
            parts.append(pending)
            pending = ""
        elif not parts:
            leading = True
        last_field = True
    if pending:
        parts.append(pending)
    trailing = last_field and bool(parts)
    if not parts:
        return None
    return Found(tuple(parts), kind, type_, file, function, condition, leading, trailing)
