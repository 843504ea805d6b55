"""Render one Diagnosis for people and programs: terminal text, JSON, Markdown, HTML.

    render(diagnosis, "html")          -> one self-contained HTML page
    render_to_console(diagnosis, con)  -> rich output, coloured when `con` is a terminal

JSON is exactly `Diagnosis.to_dict()` (schema triage.diagnosis/1); the other formats are views
of the same facts and cap long lists with an "N more" note, so the JSON is the full record.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from triage.model import Diagnosis

if TYPE_CHECKING:
    from rich.console import Console

FORMATS = ("text", "json", "md", "html")

__all__ = ["FORMATS", "render", "render_to_console"]


def render(diagnosis: Diagnosis, fmt: str) -> str:
    """The diagnosis as text|json|md|html. Text is plain (no colour codes)."""
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


def render_to_console(diagnosis: Diagnosis, console: Console) -> None:
    """Print the text report on `console`; rich adds colour only when it is a terminal."""
    from .text import print_report

    print_report(diagnosis, console)
