"""GitHub-flavoured Markdown for an issue comment (the bot posts it as is).

Log text is hostile input here: it may hold `</details>`, `<script>`, backtick runs, `@user`
mentions or `#123` references. Every piece of it goes into a code span or a fenced block whose
fence is longer than any backtick run inside, or through `_text`, which escapes Markdown and
HTML and breaks mentions and issue references so a log line cannot ping people or link issues.
What to show comes from the report view (`view.py`); this module only formats it.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

import regex

from triage import regex_cache
from triage.model import Diagnosis

from . import common as c
from .view import build
from .view_model import EvidenceGroup, Label, ReportView
from .wording import TITLES

# GitHub rejects comments over 65,536 characters; stay well below with room for a bot header.
MAX_CHARS = 60_000

_MD_PUNCT = regex_cache.compile(r"([\\`*_\[\]|~])")
_MENTION = regex_cache.compile(r"([@#])(?=[\p{L}\p{N}_])")
_BACKTICK_RUN = regex_cache.compile(r"`+")


@dataclass(frozen=True)
class _Caps:
    timeline: int
    evidence: int
    evidence_lines: int
    problems: int
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
    view = build(d)
    for caps in _CAPS:
        out = _render(view, caps)
        if len(out) <= MAX_CHARS:
            return out
    return out


def render_brief_markdown(d: Diagnosis) -> str:
    """The short form for chat: verdict, culprit, top fix, one line of evidence."""
    view = build(d)
    lines = []
    for key, value in view.brief():
        if key == "triage":
            lines.append(f"**triage: {md_text(value)}**")
        elif key in ("fix", "collect"):
            lines.append(f"- **{key}:** {_action(value, 1000)}")
        elif key == "evidence":
            lines.append(f"- **{key}:** {md_code(value)}")
        else:
            lines.append(f"- **{key}:** {md_text(value)}")
    return "\n".join(lines) + "\n"


def md_text(s: str | None) -> str:
    """User or log text as inert inline Markdown on one line."""
    t = regex.sub(r"\s+", " ", c.short(s, 1000))
    t = html.escape(t, quote=False)
    t = _MD_PUNCT.sub(r"\\\1", t)
    # A zero-width space after `@`/`#` stops GitHub's mention and issue-reference filters.
    return _MENTION.sub("\\1\u200b", t)


def md_code(s: str | None, in_table: bool = False) -> str:
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
        out.append(md_code(piece) if is_code else md_text(piece))
    return "".join(out)


def _label_row(title: str, label: Label, first: bool) -> str:
    name = md_text(label.name)
    if not first:
        name = f"_{name}_" if name else name
    head = f"**{title}**" if first else ""
    pct = f"{label.pct} (tied)" if label.tied else label.pct
    return f"| {head} | {md_code(label.id, True)} {name} | {pct} |"


def _render(v: ReportView, caps: _Caps) -> str:
    out: list[str] = []
    add = out.append
    add(f"### triage: {md_text(v.verdict)}")
    add("")
    if v.outcome is not None:
        add(f"**Job: {md_text(v.outcome.word)}** ({md_text(c.lower_first(v.outcome.why))})")
        shown = v.outcome.evidence[:2] if not (v.symptoms or v.root_causes) else ()
        for where, text in shown:
            add(f"- {md_text(where)}: {md_code(text)}" if where else f"- {md_code(text)}")
        add("")
    if not v.ended_well:  # else the summary says what the outcome line already said
        add(f"> {md_text(v.summary)}")
        add("")
    if not v.abstain and (v.symptoms or v.root_causes):
        add("| | Label | Score |")
        add("|---|---|---:|")
        for title, labels in (("Symptom", v.symptoms), ("Root cause", v.root_causes)):
            for n, label in enumerate(labels):
                add(_label_row(title, label, n == 0))
        if v.stage:
            stage_id, _, stage_name = v.stage.partition(" ")
            add(f"| **Stage** | {md_code(stage_id, True)} {md_text(stage_name)} | |")
        add("")
    if v.unreadable:
        noun = "input" if v.unreadable == 1 else "inputs"
        add("> [!WARNING]")
        add(f"> {v.unreadable} {noun} could not be read completely; see **Inputs** below.")
        add("")
    if v.abstain:
        add(f"#### {TITLES.collect_next}")
        add("")
        for item in v.collect_next:
            add(f"- {_action(item.text, 1000)}")
        add("")
    _who(v, add)
    if v.fixes:
        add(f"#### {TITLES.fixes}")
        add("")
        for n, fix in enumerate(v.fixes, 1):
            why = f": {md_text(fix.why)}" if fix.why else ""
            pct = f"{fix.pct}, tied" if fix.tied else fix.pct
            add(f"{n}. **{md_text(fix.id)} {md_text(fix.name)}** ({pct}){why}")
            for action in fix.actions[: caps.actions]:
                add(f"   - {_action(action.text, caps.action_chars)}")
            if len(fix.actions) > caps.actions:
                add(f"   - _{len(fix.actions) - caps.actions} more actions in the JSON_")
        if v.fixes_hidden:
            noun = "pattern" if v.fixes_hidden == 1 else "patterns"
            add("")
            add(f"_{v.fixes_hidden} less likely fix {noun} in the JSON report._")
        add("")
    if v.evidence:
        add(f"#### {TITLES.evidence}")
        add("")
        shown = v.evidence[: caps.evidence]
        for e in shown[:3]:
            _evidence(e, caps, add)
        if len(shown) > 3:
            more = len(shown) - 3
            add(f"<details><summary>{more} more evidence {_lines(more)}</summary>")
            add("")
            for e in shown[3:]:
                _evidence(e, caps, add)
            add("</details>")
            add("")
        if len(v.evidence) > len(shown):
            more = len(v.evidence) - len(shown)
            add(f"_{more} more evidence {_lines(more)} in the JSON report._")
            add("")
    _stacks(v, add)
    _progress(v, add)
    if v.similar:
        add(f"#### {TITLES.similar}")
        add("")
        for case in v.similar[:10]:
            name = md_text(case.id) or "case"
            link = f"[{name}](<{case.url}>)" if case.url else name
            add(f"- {link} ({case.pct} match)")
        add("")
    if v.findings:
        add(f"#### {TITLES.findings}")
        add("")
        add("| Kind | Ranks | Summary |")
        add("|---|---|---|")
        for f in v.findings[: caps.findings]:
            add(f"| {md_code(f.kind, True)} | {md_text(f.ranks)} | {md_text(f.summary)} |")
        if len(v.findings) > caps.findings:
            add(f"\n_{len(v.findings) - caps.findings} more findings in the JSON report._")
        add("")
    if v.timeline.rows:
        _timeline(v, caps, add)
    _inputs(v, caps, add)
    add("<sub>Generated by triage · schema `triage.diagnosis/1`</sub>")
    return "\n".join(out) + "\n"


def _who(v: ReportView, add: Callable[[str], None]) -> None:
    who = v.who
    if who is None:
        return
    add(f"#### {TITLES.who}")
    add("")
    f = who.first
    culprit = who.culprit_line()
    if culprit:
        add(f"- **Culprit:** {md_text(culprit)}")
    if f is not None:
        if f.time:
            add(f"- **{md_text(f.title)}:** at {f.time}")
        if f.note:
            add(f"  - {md_text(f.note)}")
    h = who.hang
    if h is not None:
        add(f"- **Hang:** {md_text(h.headline)}")
        if h.collective:
            add(f"  - collective: {md_code(h.collective)}")
        if h.explanation:
            add(f"  - {md_text(h.explanation)}")
    add("")
    if f is not None and f.text:
        add(_block(f.text, 25))
        add("")


def _evidence(e: EvidenceGroup, caps: _Caps, add: Callable[[str], None]) -> None:
    why = f" · why: {md_code(e.why)}" if e.why else ""
    folded = ""
    if e.count > 1:
        folded = f" ({e.count} lines{', details differ' if e.varies else ''})"
    add(f"**{md_code(e.where)}** · {md_text(e.who)}{folded}{why}")
    add("")
    add(_block(e.text, caps.evidence_lines))
    add("")


def _stacks(v: ReportView, add: Callable[[str], None]) -> None:
    if not v.stacks:
        return
    add(f"#### {TITLES.stacks}")
    add("")
    add("| Ranks | Main thread, innermost first | |")
    add("|---|---|---|")
    for s in v.stacks:
        frames = "<br>".join(md_code(f, True) for f in s.frames[:4]) or md_code(s.top, True)
        mark = "**← odd one out**" if s.outlier else "**← the culprit**" if s.culprit else ""
        mark = f"{mark} {md_text(s.waits)}".strip() if s.waits else mark
        ranks = f"**{md_text(s.ranks)}**" if s.outlier or s.culprit else md_text(s.ranks)
        add(f"| {ranks} | {frames} | {mark} |")
    add("")


def _progress(v: ReportView, add: Callable[[str], None]) -> None:
    if not v.progress:
        return
    add(f"#### {TITLES.flight_recorder}")
    add("")
    for t in v.progress:
        stuck = f" · {md_text(t.stuck)}" if t.stuck else ""
        add(f"Process group {md_code(t.group)}{stuck}")
        add("")
        if t.states_known:
            add("| Ranks | Entered | Started | Completed | |")
            add("|---|---:|---:|---:|---|")
        else:
            add("| Ranks | Entered | |")
            add("|---|---:|---|")
        for r in t.rows:
            mark = f"**← {md_text(r.note)}**" if r.outlier and r.note else ""
            ranks = f"**{md_text(r.ranks)}**" if r.outlier else md_text(r.ranks)
            cells = [r.enqueued, r.started, r.completed] if t.states_known else [r.enqueued]
            add(f"| {ranks} | {' | '.join(md_text(x) for x in cells)} | {mark} |")
        add("")


def _lines(count: int) -> str:
    return "line" if count == 1 else "lines"


def _timeline(v: ReportView, caps: _Caps, add: Callable[[str], None]) -> None:
    rows, note = v.timeline.capped(caps.timeline)
    total = len(v.timeline.rows)
    add(f"<details><summary>{TITLES.timeline} ({total} event{'' if total == 1 else 's'})</summary>")
    add("")
    add("| Time | Rank | Role | What |")
    add("|---|---:|---|---|")
    for r in rows:
        when = r.clock + (f" ({r.offset})" if r.offset else "")
        role = f"**{r.role}**" if r.role == "initiating" else md_text(r.role)
        text = md_code(c.one_line(r.text, 200), in_table=True)
        add(f"| {when} | {md_text(r.rank)} | {role} | {text} |")
    if note:
        add("")
        add(f"_{md_text(note)}_")
    add("")
    add("</details>")
    add("")


def _inputs(v: ReportView, caps: _Caps, add: Callable[[str], None]) -> None:
    add(f"#### {TITLES.inputs}")
    add("")
    add(md_text(v.inputs.overview))
    add("")
    if not v.inputs.groups:
        return
    problems = v.inputs.problems
    if problems:
        add("| Could not be read completely | Kind | Rank | Host | Why |")
        add("|---|---|---:|---|---|")
        for p in problems[: caps.problems]:
            warnings = "<br>".join(f"**{md_text(w)}**" for w in p.warnings[:5])
            host = md_code(p.host, True) if p.host != "-" else "-"
            add(f"| {md_code(p.path, True)} | {p.kind} | {md_text(p.rank)} | {host} | {warnings} |")
        if len(problems) > caps.problems:
            add("")
            add(f"_{len(problems) - caps.problems} more in the JSON report._")
        add("")
    noun = "input" if sum(g.count for g in v.inputs.groups) == 1 else "inputs"
    add(f"<details><summary>All {noun} by kind and status</summary>")
    add("")
    add("| Kind | Status | Count | Ranks | For example |")
    add("|---|---|---:|---|---|")
    for g in v.inputs.groups:
        status = f"**{g.status_said}**" if g.status == "problem" else g.status_said
        add(
            f"| {g.kind} | {status} | {g.count} | {md_text(g.ranks or '-')} "
            f"| {md_code(g.example, True)} |"
        )
    add("")
    add("</details>")
    add("")
