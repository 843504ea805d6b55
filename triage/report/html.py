"""One self-contained HTML page: inline CSS and SVG, no external fonts, images or scripts.

The template (`templates/report.html.j2`) is rendered with jinja2 autoescape on, so every log
string is escaped; a Content-Security-Policy in the page forbids remote loads and every script
but one: the copy buttons' few lines, allowed by their sha256 hash, so a script that log text
smuggled in could not run even if escaping failed. Without that script the page loses only
its copy buttons. What to show comes from the report view (`view.py`); this module turns it
into template values and lays out the timeline picture (an inline SVG, no script).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from functools import lru_cache
from typing import Any

import jinja2

from triage.model import SCHEMA, Diagnosis

from . import common as c
from .view import build, generated
from .view_model import Lanes, ReportView
from .wording import TITLES

TIMELINE_ROWS = 300
TIMELINE_OPEN = 40  # a longer table starts folded: the picture above tells the story
PROBLEM_ROWS = 200
FINDING_ROWS = 100
SIMILAR_ROWS = 20
EVIDENCE_ITEMS = 30
EVIDENCE_LINES = 40
# Above this the embedded JSON would make the page heavy (a 1,024-rank job's is megabytes);
# the JSON report has it all.
RAW_JSON_CHARS = 400_000

# The copy buttons: the one script the page may run (its hash goes into the CSP). It marks
# the page as scripted (the buttons are hidden otherwise) and copies an action's text.
COPY_SCRIPT = """
document.documentElement.classList.add("js");
document.addEventListener("click", function (event) {
  var button = event.target.closest ? event.target.closest("button.copy") : null;
  if (!button) { return; }
  var text = button.getAttribute("data-copy") || "";
  function done(label) {
    button.textContent = label;
    setTimeout(function () { button.textContent = "copy"; }, 1500);
  }
  function fallback() {
    var area = document.createElement("textarea");
    area.value = text;
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    document.body.removeChild(area);
    done(ok ? "copied" : "press Ctrl+C");
  }
  if (navigator.clipboard && navigator.clipboard.writeText) {
    navigator.clipboard.writeText(text).then(function () { done("copied"); }, fallback);
  } else {
    fallback();
  }
});
"""


def script_hash(script: str = COPY_SCRIPT) -> str:
    """The CSP source that allows exactly this inline script."""
    digest = hashlib.sha256(script.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The templates of `triage/report/templates/` (the diagnosis and the fleet report),
    autoescaped."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("triage.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_html(d: Diagnosis) -> str:
    view = build(d)
    return environment().get_template("report.html.j2").render(**_values(view, d))


def _values(v: ReportView, d: Diagnosis) -> dict[str, Any]:
    rows, note = v.timeline.capped(TIMELINE_ROWS)
    return {
        "schema": SCHEMA,
        "titles": TITLES,
        "v": v,
        "script": COPY_SCRIPT,
        "script_hash": script_hash(),
        "pct_width": lambda share: f"{share * 100:.0f}%",
        "cut": c.cut_lines,
        "first_line": c.one_line,
        "segments": c.segments,
        "evidence": v.evidence[:EVIDENCE_ITEMS],
        "evidence_more": max(0, len(v.evidence) - EVIDENCE_ITEMS),
        "evidence_lines": EVIDENCE_LINES,
        "similar": v.similar[:SIMILAR_ROWS],
        "findings": v.findings[:FINDING_ROWS],
        "findings_more": max(0, len(v.findings) - FINDING_ROWS),
        "timeline_rows": rows,
        "timeline_note": note,
        "timeline_open": len(rows) <= TIMELINE_OPEN,
        "picture": _picture(v.lanes) if v.lanes is not None else None,
        "problems": v.inputs.problems[:PROBLEM_ROWS],
        "problems_more": max(0, len(v.inputs.problems) - PROBLEM_ROWS),
        "raw_json": _raw_json(d),
        "generated": generated(),
    }


# --------------------------------------------------------------------------- the picture

_WIDTH = 1000
_LABEL = 150  # the lane labels' column
_RIGHT = 14
_TOP = 26  # the time axis
_LANE = 20


def _picture(lanes: Lanes) -> dict[str, Any]:
    """The swimlanes as SVG geometry: one row per lane, marks placed on one time axis."""
    plot = _WIDTH - _LABEL - _RIGHT

    def at(x: float) -> float:
        return round(_LABEL + x * plot, 1)

    rows = []
    for n, lane in enumerate(lanes.lanes):
        y = _TOP + n * _LANE
        marks = []
        for m in lane.marks:
            size = 3.0 if m.kind == "cascade" else 4.0
            if lane.shared and m.count > 1:
                size = min(7.0, size + math.log2(m.count))
            marks.append(
                {"kind": m.kind, "cx": at(m.x), "cy": y + _LANE / 2, "r": size, "title": m.title}
            )
        rows.append(
            {
                "label": lane.label,
                "note": lane.note,
                "culprit": lane.culprit,
                "shared": lane.shared,
                "y": y,
                "mid": y + _LANE / 2,
                "marks": marks,
            }
        )
    height = _TOP + len(rows) * _LANE + 6
    return {
        "width": _WIDTH,
        "height": height,
        "left": _LABEL,
        "right": _WIDTH - _RIGHT,
        "label_x": _LABEL - 8,
        "top": _TOP,
        "bottom": height - 4,
        "ticks": [{"x": at(x), "label": label} for x, label in lanes.ticks],
        "rows": rows,
        "start": lanes.start,
        "span": c.duration(lanes.span),
        "earlier": lanes.earlier,
        "restarts": lanes.restarts,
    }


def _raw_json(d: Diagnosis) -> dict[str, Any]:
    text = json.dumps(d.to_dict(), indent=2)
    if len(text) > RAW_JSON_CHARS:
        return {"text": "", "too_big": len(text)}
    return {"text": text, "too_big": 0}
