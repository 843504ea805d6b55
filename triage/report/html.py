"""One self-contained HTML page: inline CSS, no scripts, no external fonts or images.

The template (`templates/report.html.j2`) is rendered with jinja2 autoescape on, so every log
string is escaped; a Content-Security-Policy in the page forbids scripts and remote loads as a
second line of defence. This module turns a Diagnosis into plain view rows and caps the long
lists (timeline, inputs, lanes) so 1,024-rank jobs still open in a browser at once.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any

import jinja2

from triage.model import SCHEMA, Diagnosis, InputSummary, ScoredLabel, TimelineEntry

from . import common as c

TIMELINE_ROWS = 300
INPUT_ROWS = 200
FINDING_ROWS = 100
SIMILAR_ROWS = 20
EVIDENCE_ITEMS = 30
EVIDENCE_LINES = 40
LANES = 32
DOTS_PER_LANE = 200
# Above this the embedded JSON would make the page slow to open; the JSON report has it all.
RAW_JSON_CHARS = 3_000_000


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("triage.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_html(d: Diagnosis) -> str:
    return _environment().get_template("report.html.j2").render(**view(d))


def view(d: Diagnosis) -> dict[str, Any]:
    """Everything the template shows, as plain values (strings already cleaned, not escaped)."""
    abstain = c.is_abstention(d)
    base = c.base_dir(d)
    warned = [i for i in d.inputs if i.warnings]
    evidence = d.evidence[:EVIDENCE_ITEMS]
    return {
        "schema": SCHEMA,
        "verdict": c.verdict(d),
        "summary": c.short(d.summary),
        "abstain": abstain,
        "collect_next": [c.segments(item) for item in c.collect_next(d)] if abstain else [],
        "symptoms": [_label(x) for x in d.symptoms[:3]],
        "root_causes": [_label(x) for x in d.root_causes[:3]],
        "stage": (
            {"id": c.short(d.stage.id), "name": c.short(d.stage.name or d.stage.slug)}
            if d.stage
            else None
        ),
        "warned_inputs": len(warned),
        "who": _who(d, base),
        "fixes": [
            {
                "id": c.short(f.id),
                "name": c.short(f.name),
                "pct": c.pct(f.score),
                "width": _width(f.score),
                "why": c.short(f.why),
                "actions": [c.segments(a) for a in f.actions],
            }
            for f in d.fix_patterns
        ],
        "evidence": [
            {
                "where": c.short(c.where(e.source, e.line, base)),
                "rank": c.rank_str(e.rank),
                "why": c.short(e.why),
                **_cut(e.text, EVIDENCE_LINES),
            }
            for e in evidence
        ],
        "evidence_more": len(d.evidence) - len(evidence),
        "similar": [
            {"id": c.short(s.id), "url": c.safe_url(s.url), "pct": c.pct(s.score)}
            for s in d.similar_cases[:SIMILAR_ROWS]
        ],
        "findings": [
            {"kind": c.short(f.kind), "ranks": c.ranks_str(f.ranks), "summary": c.short(f.summary)}
            for f in d.findings[:FINDING_ROWS]
        ],
        "findings_more": max(0, len(d.findings) - FINDING_ROWS),
        "timeline": _timeline(d.timeline, base),
        "lanes": _lanes(d),
        "inputs": _inputs(d.inputs, base),
        "inputs_overview": c.inputs_overview(d.inputs, base),
        "raw_json": _raw_json(d),
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _label(x: ScoredLabel) -> dict[str, Any]:
    return {
        "id": c.short(x.id),
        "name": c.short(x.name),
        "pct": c.pct(x.score),
        "width": _width(x.score),
    }


def _width(score: float) -> str:
    """A score as a CSS percentage for the bar; clamped so a bad score cannot break layout."""
    return f"{max(0.0, min(1.0, score)) * 100:.0f}%"


def _cut(text: str, max_lines: int) -> dict[str, Any]:
    shown, hidden = c.cut_lines(text, max_lines)
    return {"text": shown, "hidden": hidden}


def _who(d: Diagnosis, base: str) -> dict[str, Any] | None:
    if d.first_failure is None and not d.culprit_ranks and d.hang is None:
        return None
    first = None
    if d.first_failure is not None:
        f = d.first_failure
        first = {
            "rank": c.rank_str(f.rank),
            "host": c.short(f.host or ""),
            "time": c.iso_time(f.time) if f.time is not None else "",
            "where": c.short(c.where(f.source, f.line, base)),
            **_cut(f.text, 20),
        }
    hang = None
    if d.hang is not None:
        h = d.hang
        hang = {
            "detected": h.detected,
            "lagging": c.ranks_str(h.lagging_ranks) if h.lagging_ranks else "",
            "pg": c.short(h.process_group or ""),
            "collective": c.hang_collective(d),
            "explanation": c.short(h.explanation),
        }
    return {"first": first, "culprits": c.ranks_str(d.culprit_ranks), "hang": hang}


def _timeline(entries: tuple[TimelineEntry, ...], base: str) -> dict[str, Any]:
    capped = c.cap_timeline(entries, TIMELINE_ROWS)
    span = c.time_span(entries)
    start = span[0] if span else None
    rows = []
    for _, e in capped.rows:
        body, hidden = c.cut_lines(e.text, 30)
        first, _, rest = body.partition("\n")
        rows.append(
            {
                "clock": c.clock_time(e.time),
                "iso": c.iso_time(e.time),
                "offset": c.offset(e.time, start),
                "rank": c.rank_str(e.rank),
                "role": e.role if e.role in ("initiating", "cascade", "context") else "context",
                "role_label": c.short(e.role),
                "first": first,
                "rest": rest,
                "hidden": hidden,
                "where": c.short(c.where(e.source, e.line, base)),
            }
        )
    return {"rows": rows, "total": len(entries), "note": capped.note()}


def _lanes(d: Diagnosis) -> dict[str, Any] | None:
    """Per-rank lanes: each timed event a dot at its place between the first and last event.

    The window opens at the first initiating or cascade event: a start-up line hours earlier
    would otherwise squeeze the whole failure into the right edge. Earlier context events sit
    on the left edge.
    """
    span = c.time_span(d.timeline)
    if span is None:
        return None
    start, end = span
    failing = [e.time for e in d.timeline if e.time is not None and e.role != "context"]
    if failing and min(failing) < end:
        start = min(failing)
    earlier = sum(1 for e in d.timeline if e.time is not None and e.time < start)
    by_rank: dict[int, list[TimelineEntry]] = defaultdict(list)
    for e in d.timeline:
        if e.rank is not None and e.time is not None:
            by_rank[e.rank].append(e)
    if not by_rank:
        return None
    culprits = set(d.culprit_ranks)
    if d.hang is not None:
        culprits |= set(d.hang.lagging_ranks)

    def priority(rank: int) -> tuple[int, float, int]:
        events = by_rank[rank]
        initiating = any(e.role == "initiating" for e in events)
        return (
            0 if rank in culprits else 1 if initiating else 2,
            min(e.time or 0.0 for e in events),
            rank,
        )

    # Culprit and initiating ranks on top, where the eye starts; the rest by rank.
    chosen = sorted(by_rank, key=priority)[:LANES]
    chosen.sort(key=lambda r: (priority(r)[0], r))
    lanes = []
    for rank in chosen:
        seen: dict[tuple[int, str], dict[str, str]] = {}
        # Cascade first so that an initiating dot at the same spot is drawn on top.
        for e in sorted(by_rank[rank], key=lambda e: e.role == "initiating"):
            pos = max(0.0, (e.time - start) / (end - start) * 100) if e.time is not None else 0.0
            key = (int(pos * 4), e.role)  # one dot per quarter percent and role
            seen[key] = {
                "left": f"{pos:.2f}%",
                "role": e.role if e.role in ("initiating", "cascade", "context") else "context",
                "title": f"{c.clock_time(e.time)} rank {rank}: {c.one_line(e.text, 160)}",
            }
        dots = list(seen.values())[-DOTS_PER_LANE:]
        lanes.append({"rank": rank, "culprit": rank in culprits, "dots": dots})
    return {
        "lanes": lanes,
        "more": len(by_rank) - len(chosen),
        "start": c.iso_time(start),
        "span": f"{end - start:.3f}s",
        "earlier": earlier,
    }


def _inputs(inputs: tuple[InputSummary, ...], base: str) -> dict[str, Any]:
    ordered = c.inputs_in_order(inputs)
    rows = [
        {
            "path": c.short(c.rel(i.path, base)),
            "kind": i.kind.value,
            "rank": c.rank_str(i.rank),
            "host": c.short(i.host or "-"),
            "events": i.events,
            "warnings": [c.short(w) for w in i.warnings],
        }
        for i in ordered[:INPUT_ROWS]
    ]
    return {"rows": rows, "more": len(ordered) - len(rows)}


def _raw_json(d: Diagnosis) -> dict[str, Any]:
    text = json.dumps(d.to_dict(), indent=2)
    if len(text) > RAW_JSON_CHARS:
        return {"text": "", "too_big": len(text)}
    return {"text": text, "too_big": 0}
