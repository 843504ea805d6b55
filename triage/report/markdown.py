"""GitHub-flavoured Markdown for an issue comment (the bot posts it as is).

Log text is hostile input here: it may hold `</details>`, `<script>`, backtick runs, `@user`
mentions or `#123` references. Every piece of it goes into a code span or a fenced block whose
fence is longer than any backtick run inside, or through `_text`, which escapes Markdown and
HTML and breaks mentions and issue references so a log line cannot ping people or link issues.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

import regex

from triage.model import Diagnosis, Evidence, ScoredLabel

from . import common as c

# GitHub rejects comments over 65,536 characters; stay well below with room for a bot header.
MAX_CHARS = 60_000

_MD_PUNCT = regex.compile(r"([\\`*_\[\]|~])")
_MENTION = regex.compile(r"([@#])(?=[\p{L}\p{N}_])")
_BACKTICK_RUN = regex.compile(r"`+")


@dataclass(frozen=True)
class _Caps:
    timeline: int
    evidence: int
    evidence_lines: int
    inputs: int
    findings: int
    actions: int
    action_chars: int


# Tried in order until the comment fits in MAX_CHARS.
_CAPS = (
    _Caps(40, 10, 25, 40, 20, 12, 600),
    _Caps(15, 5, 10, 15, 10, 8, 400),
    _Caps(5, 2, 5, 5, 5, 4, 200),
)


def render_markdown(d: Diagnosis) -> str:
    for caps in _CAPS:
        out = _render(d, caps)
        if len(out) <= MAX_CHARS:
            return out
    return out


def _text(s: str | None) -> str:
    """User or log text as inert inline Markdown on one line."""
    t = regex.sub(r"\s+", " ", c.short(s, 1000))
    t = html.escape(t, quote=False)
    t = _MD_PUNCT.sub(r"\\\1", t)
    # A zero-width space after `@`/`#` stops GitHub's mention and issue-reference filters.
    return _MENTION.sub("\\1\u200b", t)


def _code(s: str | None, in_table: bool = False) -> str:
    """An inline code span that no backtick run inside can close early."""
    t = " ".join(c.short(s, 1000).split())
    if not t:
        return ""
    longest = max((len(m) for m in _BACKTICK_RUN.findall(t)), default=0)
    fence = "`" * (longest + 1)
    if t.startswith("`") or t.endswith("`") or (t.startswith(" ") and t.endswith(" ")):
        t = f" {t} "
    if in_table:
        # GFM splits table cells on `|` even inside code spans; `\|` is the documented escape.
        t = t.replace("|", "\\|")
    return f"{fence}{t}{fence}"


def _block(s: str | None, max_lines: int) -> str:
    """A fenced code block; the fence is longer than any backtick run in the text."""
    text, hidden = c.cut_lines(s, max_lines)
    longest = max((len(m) for m in _BACKTICK_RUN.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    if hidden:
        text += f"\n… {hidden} more lines"
    return f"{fence}text\n{text}\n{fence}"


def _action(action: str, limit: int) -> str:
    out = []
    used = 0
    for is_code, piece in c.segments(action):
        if used >= limit:
            out.append("…")
            break
        piece = piece[: max(1, limit - used)]
        used += len(piece)
        out.append(_code(piece) if is_code else _text(piece))
    return "".join(out)


def _label_row(title: str, label: ScoredLabel, first: bool) -> str:
    name = _text(label.name)
    if not first:
        name = f"_{name}_" if name else name
    head = f"**{title}**" if first else ""
    return f"| {head} | {_code(label.id, True)} {name} | {c.pct(label.score)} |"


def _render(d: Diagnosis, caps: _Caps) -> str:
    out: list[str] = []
    add = out.append
    add(f"### triage: {_text(c.verdict(d))}")
    add("")
    add(f"> {_text(d.summary)}")
    add("")
    if not c.is_abstention(d):
        add("| | Label | Score |")
        add("|---|---|---:|")
        for title, labels in (("Symptom", d.symptoms), ("Root cause", d.root_causes)):
            for n, label in enumerate(labels[:3]):
                add(_label_row(title, label, n == 0))
        if d.stage is not None:
            add(
                f"| **Stage** | {_code(d.stage.id, True)} {_text(d.stage.name or d.stage.slug)} | |"
            )
        add("")
    warned = [i for i in d.inputs if i.warnings]
    if warned:
        noun = "input" if len(warned) == 1 else "inputs"
        add("> [!WARNING]")
        add(f"> {len(warned)} {noun} could not be read completely; see **Inputs** below.")
        add("")
    if c.is_abstention(d):
        add("#### What to collect next")
        add("")
        for item in c.collect_next(d):
            add(f"- {_action(item, 1000)}")
        add("")
    _who(d, add)
    if d.fix_patterns:
        add("#### What to do")
        add("")
        for n, fix in enumerate(d.fix_patterns, 1):
            why = f": {_text(fix.why)}" if fix.why else ""
            add(f"{n}. **{_text(fix.id)} {_text(fix.name)}** ({c.pct(fix.score)}){why}")
            for action in fix.actions[: caps.actions]:
                add(f"   - {_action(action, caps.action_chars)}")
            if len(fix.actions) > caps.actions:
                add(f"   - _{len(fix.actions) - caps.actions} more actions in the JSON_")
        add("")
    if d.evidence:
        add("#### Evidence")
        add("")
        shown = d.evidence[: caps.evidence]
        for e in shown[:3]:
            _evidence(e, caps, c.base_dir(d), add)
        if len(shown) > 3:
            add(f"<details><summary>{len(shown) - 3} more evidence lines</summary>")
            add("")
            for e in shown[3:]:
                _evidence(e, caps, c.base_dir(d), add)
            add("</details>")
            add("")
        if len(d.evidence) > len(shown):
            add(f"_{len(d.evidence) - len(shown)} more evidence lines in the JSON report._")
            add("")
    if d.similar_cases:
        add("#### Similar cases")
        add("")
        for case in d.similar_cases[:10]:
            url = c.safe_url(case.url)
            name = _text(case.id) or "case"
            link = f"[{name}](<{url}>)" if url else name
            add(f"- {link} ({c.pct(case.score)} match)")
        add("")
    if d.findings:
        add("#### Findings")
        add("")
        add("| Kind | Ranks | Summary |")
        add("|---|---|---|")
        for f in d.findings[: caps.findings]:
            add(f"| {_code(f.kind, True)} | {_text(c.ranks_str(f.ranks))} | {_text(f.summary)} |")
        if len(d.findings) > caps.findings:
            add(f"\n_{len(d.findings) - caps.findings} more findings in the JSON report._")
        add("")
    if d.timeline:
        _timeline(d, caps, add)
    _inputs(d, caps, add)
    add("<sub>Generated by triage · schema `triage.diagnosis/1`</sub>")
    return "\n".join(out) + "\n"


def _who(d: Diagnosis, add: Callable[[str], None]) -> None:
    if d.first_failure is None and not d.culprit_ranks and d.hang is None:
        return
    add("#### Who")
    add("")
    f = d.first_failure
    if f is not None:
        bits = [f"rank **{c.rank_str(f.rank)}**"]
        if f.host:
            bits.append(f"on {_code(f.host)}")
        if f.time is not None:
            bits.append(f"at {c.iso_time(f.time)}")
        bits.append(f"in {_code(c.where(f.source, f.line, c.base_dir(d)))}")
        add(f"- **First failure:** {' '.join(bits)}")
    if d.culprit_ranks:
        add(f"- **Culprit ranks:** {_text(c.ranks_str(d.culprit_ranks))}")
    h = d.hang
    if h is not None:
        bits = ["detected" if h.detected else "not detected"]
        if h.lagging_ranks:
            bits.append(f"lagging ranks {_text(c.ranks_str(h.lagging_ranks))}")
        if h.process_group:
            bits.append(f"process group {_code(h.process_group)}")
        add(f"- **Hang:** {'; '.join(bits)}")
        collective = c.hang_collective(d)
        if collective:
            add(f"  - collective: {_code(collective)}")
        if h.explanation:
            add(f"  - {_text(h.explanation)}")
    add("")
    if f is not None and f.text:
        add(_block(f.text, 25))
        add("")


def _evidence(e: Evidence, caps: _Caps, base: str, add: Callable[[str], None]) -> None:
    why = f" · why: {_code(e.why)}" if e.why else ""
    add(f"**{_code(c.where(e.source, e.line, base))}** · rank {c.rank_str(e.rank)}{why}")
    add("")
    add(_block(e.text, caps.evidence_lines))
    add("")


def _timeline(d: Diagnosis, caps: _Caps, add: Callable[[str], None]) -> None:
    capped = c.cap_timeline(d.timeline, caps.timeline)
    span = c.time_span(d.timeline)
    start = span[0] if span else None
    add(f"<details><summary>What happened, in order ({len(d.timeline)} events)</summary>")
    add("")
    add("| Time | Rank | Role | What |")
    add("|---|---:|---|---|")
    for _, e in capped.rows:
        when = c.clock_time(e.time)
        if start is not None and e.time is not None:
            when += f" ({c.offset(e.time, start)})"
        role = f"**{e.role}**" if e.role == "initiating" else _text(e.role)
        text = _code(c.one_line(e.text, 200), in_table=True)
        add(f"| {when} | {c.rank_str(e.rank)} | {role} | {text} |")
    if capped.hidden:
        add("")
        add(f"_{_text(capped.note())}_")
    add("")
    add("</details>")
    add("")


def _inputs(d: Diagnosis, caps: _Caps, add: Callable[[str], None]) -> None:
    add("#### Inputs")
    add("")
    base = c.base_dir(d)
    add(_text(c.inputs_overview(d.inputs, base)))
    add("")
    if not d.inputs:
        return
    ordered = c.inputs_in_order(d.inputs)
    warned = [i for i in ordered if i.warnings]
    rows = ordered[: caps.inputs]

    def table() -> None:
        add("| Path | Kind | Rank | Host | Warnings |")
        add("|---|---|---:|---|---|")
        for i in rows:
            warnings = "<br>".join(f"**{_text(w)}**" for w in i.warnings[:5]) or ""
            add(
                f"| {_code(c.rel(i.path, base), True)} | {i.kind.value} | {c.rank_str(i.rank)} "
                f"| {_code(i.host, True) if i.host else '-'} | {warnings} |"
            )
        if len(ordered) > len(rows):
            add("")
            add(f"_{len(ordered) - len(rows)} more inputs in the JSON report._")
        add("")

    if warned:
        table()
    else:
        noun = "input" if len(ordered) == 1 else "inputs"
        add(f"<details><summary>{len(ordered)} {noun}, all read without warnings</summary>")
        add("")
        table()
        add("</details>")
        add("")
