"""Render one Diagnosis for people and programs: terminal text, JSON, Markdown, HTML.

    render(diagnosis, "html")          -> one self-contained HTML page
    render_to_console(diagnosis, con)  -> rich output, coloured when `con` is a terminal

JSON is exactly `Diagnosis.to_dict()` (schema triage.diagnosis/1); the other formats are views
of the same facts and cap long lists with an "N more" note, so the JSON is the full record.
"""

from __future__ import annotations

import json

from rich.console import Console

from triage.model import Diagnosis

from .html import render_html
from .markdown import render_markdown
from .text import print_report, render_text

FORMATS = ("text", "json", "md", "html")

__all__ = ["FORMATS", "render", "render_to_console"]


def render(diagnosis: Diagnosis, fmt: str) -> str:
    """The diagnosis as text|json|md|html. Text is plain (no colour codes)."""
    if fmt == "json":
        return json.dumps(diagnosis.to_dict(), indent=2)
    if fmt == "text":
        return render_text(diagnosis)
    if fmt == "md":
        return render_markdown(diagnosis)
    if fmt == "html":
        return render_html(diagnosis)
    raise ValueError(f"unknown report format {fmt!r}; choose one of {', '.join(FORMATS)}")


def render_to_console(diagnosis: Diagnosis, console: Console) -> None:
    """Print the text report on `console`; rich adds colour only when it is a terminal."""
    print_report(diagnosis, console)
