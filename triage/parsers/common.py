"""What every parser module shares."""

from __future__ import annotations

from typing import Any

from triage.model import Event, EventKind, Level, Source


def input_warning(
    source: Source, text: str, parser: str, *, line: int | None = None, **attrs: Any
) -> Event:
    """An INPUT_WARNING event: what `parser` could not read, placed on the source's rank."""
    return Event(
        source=source.path,
        kind=EventKind.INPUT_WARNING,
        text=text,
        line=line,
        end_line=line,
        rank=source.rank,
        local_rank=source.local_rank,
        host=source.host,
        level=Level.WARNING,
        attrs={"input": parser, **attrs},
    )
