"""What every parser module shares."""

from __future__ import annotations

import hashlib
from typing import Any

from triage import regex_cache
from triage.model import Event, EventKind, Level, Source

# A TEXT input up to this size is a paste (an issue body, a snippet) and is kept whole; bigger
# ones are files that merely are not logs.
MAX_PASTE = 1_000_000
_WS = regex_cache.compile(r"\s+")  # `regex`'s \s, as the index's evidence hashes were made with


def text_digest(text: str) -> str:
    """The fingerprint of a pasted text: its content with every whitespace run as one space
    (two pastes of the same evidence, reflowed or re-indented, have the same digest)."""
    return hashlib.sha256(_WS.sub(" ", text).strip().encode("utf-8")).hexdigest()[:16]


# Every warning for an exception a parser caught in its own code (a bug, never bad input:
# bad input is reported by what it is) starts with a parser's name and this, so that tests
# can tell a swallowed bug from a warning about the input.
PARSER_STOPPED = "parser stopped early"


def parser_stopped(parser: str, exc: BaseException, when: str = "") -> str:
    """The warning for an exception caught around a parser's own code."""
    return f"{parser} {PARSER_STOPPED}{when}: {type(exc).__name__}: {exc}"


def whole_text_event(text: str, name: str = "<pasted>") -> Event:
    """All of a text as one error event: for pastes in which the log parser found nothing
    notable (a bare assertion line, a P2P matrix) but which are still the user's evidence."""
    kind = (
        EventKind.TRACEBACK if "Traceback (most recent call last)" in text else EventKind.ERROR_LINE
    )
    return Event(
        source=name,
        kind=kind,
        text=text,
        line=1,
        end_line=text.count("\n") + 1,
        level=Level.ERROR,
    )


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
