"""Render one Diagnosis for people and programs: terminal text, JSON, Markdown, HTML.

    render(diagnosis, "html")          -> one self-contained HTML page
    render(diagnosis, "text", brief=True)  -> verdict, culprit, top fix, one evidence line
    render_to_console(diagnosis, con)  -> rich output, coloured when `con` is a terminal

JSON is exactly `Diagnosis.to_dict()` (schema triage.diagnosis/1); the other formats format
one report view (`view.build`, worked out once: what to show, grouped and capped) and cap
long lists with an "N more" note, so the JSON is the full record.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from triage.model import Diagnosis

if TYPE_CHECKING:
    from rich.console import Console

FORMATS = ("text", "json", "md", "html")
BRIEF_FORMATS = ("text", "md")  # the short form is for terminals and chat

__all__ = ["BRIEF_FORMATS", "FORMATS", "render", "render_to_console"]


def render(diagnosis: Diagnosis, fmt: str, brief: bool = False) -> str:
    """The diagnosis as text|json|md|html. Text is plain (no colour codes). `brief`: the
    short form (text and md only)."""
    if brief:
        if fmt == "text":
            from .text import render_brief

            return render_brief(diagnosis)
        if fmt == "md":
            from .markdown import render_brief_markdown

            return render_brief_markdown(diagnosis)
        raise ValueError(f"the brief form is {' or '.join(BRIEF_FORMATS)}, not {fmt!r}")
    if fmt == "json":
        return json.dumps(diagnosis.to_dict(), indent=2)
    # each renderer is imported when asked for (jinja2 and rich cost start-up time)
    if fmt == "text":
        from .text import render_text

        return render_text(diagnosis)
    if fmt == "md":
        from .markdown import render_markdown

        return render_markdown(diagnosis)
    if fmt == "html":
        from .html import render_html

        return render_html(diagnosis)
    raise ValueError(f"unknown report format {fmt!r}; choose one of {', '.join(FORMATS)}")


def render_to_console(diagnosis: Diagnosis, console: Console, brief: bool = False) -> None:
    """Print the text report on `console`; rich adds colour only when it is a terminal."""
    from .text import print_brief, print_report

    (print_brief if brief else print_report)(diagnosis, console)
