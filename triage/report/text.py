"""The terminal report: rich panels and tables, colour on a TTY, plain text everywhere else.

All log text goes into `Text` objects, never into markup strings: a log line such as
`[/bold]` or `[link=...]` must print as itself and must not raise a markup error.
"""

from __future__ import annotations

import io
from collections.abc import Iterable

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from triage.model import Diagnosis, ScoredLabel

from . import common as c

TIMELINE_ROWS = 40
INPUT_ROWS = 30
EVIDENCE_ITEMS = 12
EVIDENCE_LINES = 14
WIDTH = 100

_ROLE_STYLE = {"initiating": "bold red", "cascade": "dim", "context": ""}


def render_text(d: Diagnosis, width: int = WIDTH) -> str:
    """The report as plain text (no colour, no escape codes), `width` columns wide."""
    out = io.StringIO()
    console = Console(
        file=out,
        width=width,
        color_system=None,
        force_terminal=False,
        no_color=True,
        markup=False,
        emoji=False,
        highlight=False,
        legacy_windows=False,
        _environ={},
    )
    print_report(d, console)
    # Trailing spaces pad table cells to the width; they are noise in a pasted report.
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def print_report(d: Diagnosis, console: Console) -> None:
    plain = console.no_color or console.color_system is None
    for part in renderables(d, plain=plain):
        console.print(part)


def renderables(d: Diagnosis, plain: bool = False) -> Iterable[RenderableType]:
    yield _headline(d)
    warned = [i for i in d.inputs if i.warnings]
    if warned:
        noun = "input" if len(warned) == 1 else "inputs"
        yield Text(
            f"! {len(warned)} {noun} could not be read completely; see Inputs below.",
            style="bold yellow",
        )
    if c.is_abstention(d):
        yield _section("What to collect next")
        items = [_action(item, plain) for item in c.collect_next(d)]
        yield Padding(_bullets(items), (0, 0, 0, 2))
    who = _who(d)
    if who is not None:
        yield _section("Who")
        yield who
    if d.fix_patterns:
        yield _section("What to do")
        yield _fixes(d, plain)
    if d.evidence:
        yield _section("Evidence")
        yield _evidence(d)
    if d.similar_cases:
        yield _section("Similar cases")
        yield _similar(d)
    if d.findings:
        yield _section("Findings")
        yield _findings(d)
    if d.timeline:
        yield _section("What happened, in order")
        yield _timeline(d)
    yield _section("Inputs")
    yield _inputs(d)


# --------------------------------------------------------------------------- parts


def _section(title: str) -> RenderableType:
    return Group(Text(""), Rule(Text(title, style="bold"), align="left", style="cyan"))


def _headline(d: Diagnosis) -> Panel:
    body: list[RenderableType] = [
        Text(c.verdict(d), style="bold red" if not c.is_abstention(d) else "bold yellow"),
        Text(c.short(d.summary)),
    ]
    if not c.is_abstention(d):
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column(overflow="fold")
        grid.add_column(justify="right")
        for title, labels in (("Symptom", d.symptoms), ("Root cause", d.root_causes)):
            for n, label in enumerate(labels[:3]):
                grid.add_row(
                    title if n == 0 else "",
                    _label(label, dim=n > 0),
                    Text(c.pct(label.score), style="dim" if n > 0 else "bold"),
                )
        if d.stage is not None:
            grid.add_row(
                "Stage", Text(f"{c.short(d.stage.id)} {c.short(d.stage.name or d.stage.slug)}"), ""
            )
        body += [Text(""), grid]
    return Panel(Group(*body), title="triage", title_align="left", box=box.ROUNDED)


def _label(label: ScoredLabel, dim: bool = False) -> Text:
    return Text(f"{c.short(label.id)} {c.short(label.name)}", style="dim" if dim else "")


def _who(d: Diagnosis) -> Table | None:
    if d.first_failure is None and not d.culprit_ranks and d.hang is None:
        return None
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    f = d.first_failure
    if f is not None:
        head = Text(f"rank {c.rank_str(f.rank)}", style="bold red")
        if f.host:
            head.append(f" on {c.short(f.host)}")
        if f.time is not None:
            head.append(f" at {c.iso_time(f.time)}")
        head.append(f"  ({c.short(c.where(f.source, f.line, c.base_dir(d)))})", style="dim")
        text, hidden = c.cut_lines(f.text, 8)
        block = Text(text)
        if hidden:
            block.append(f"\n… {hidden} more lines", style="dim")
        grid.add_row("First failure", Group(head, block))
    if d.culprit_ranks:
        grid.add_row("Culprit ranks", Text(c.ranks_str(d.culprit_ranks), style="bold red"))
    h = d.hang
    if h is not None:
        lines = Text("detected" if h.detected else "not detected", style="bold")
        if h.lagging_ranks:
            lines.append(f"; lagging ranks {c.ranks_str(h.lagging_ranks)}")
        if h.process_group:
            lines.append(f"; process group {c.short(h.process_group)}")
        collective = c.hang_collective(d)
        if collective:
            lines.append(f"\ncollective: {collective}")
        if h.explanation:
            lines.append("\n" + c.short(h.explanation))
        grid.add_row("Hang", lines)
    return Padding(grid, (0, 0, 0, 2))


def _action(action: str, plain: bool) -> Text:
    text = Text()
    for is_code, piece in c.segments(action):
        if is_code and plain:
            # Without colour the backticks are the only sign of what to type.
            text.append(f"`{piece}`")
        else:
            text.append(piece, style="bold cyan" if is_code else "")
    return text


def _bullets(items: list[Text], bullet: str = "-") -> Table:
    """A list whose wrapped lines hang under the text, not under the bullet."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for item in items:
        grid.add_row(bullet, item)
    return grid


def _fixes(d: Diagnosis, plain: bool) -> RenderableType:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, style="bold")
    grid.add_column(overflow="fold")
    for n, fix in enumerate(d.fix_patterns, 1):
        head = Text(f"{c.short(fix.id)} {c.short(fix.name)}", style="bold")
        head.append(f"  {c.pct(fix.score)}", style="dim")
        body: list[RenderableType] = [head]
        if fix.actions:
            body.append(_bullets([_action(a, plain) for a in fix.actions]))
        if fix.why:
            body.append(Text(f"why: {c.short(fix.why)}", style="dim italic"))
        grid.add_row(f"{n}.", Group(*body))
    return Padding(grid, (0, 0, 0, 2))


def _evidence(d: Diagnosis) -> RenderableType:
    parts: list[RenderableType] = []
    base = c.base_dir(d)
    for e in d.evidence[:EVIDENCE_ITEMS]:
        head = Text(c.short(c.where(e.source, e.line, base)), style="bold")
        head.append(f"  rank {c.rank_str(e.rank)}")
        if e.why:
            head.append(f"  why: {c.short(e.why)}", style="dim")
        text, hidden = c.cut_lines(e.text, EVIDENCE_LINES)
        body = Text(text)
        if hidden:
            body.append(f"\n… {hidden} more lines", style="dim")
        parts += [head, Padding(body, (0, 0, 0, 4))]
    if len(d.evidence) > EVIDENCE_ITEMS:
        parts.append(Text(f"{len(d.evidence) - EVIDENCE_ITEMS} more in the JSON", style="dim"))
    return Padding(Group(*parts), (0, 0, 0, 2))


def _similar(d: Diagnosis) -> RenderableType:
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
    table.add_column("case", no_wrap=True)
    table.add_column("match", justify="right")
    table.add_column("link", overflow="fold")
    for case in d.similar_cases[:10]:
        url = c.safe_url(case.url)
        link = Text(url or c.short(case.url or "-"), style=f"link {url}" if url else "")
        table.add_row(Text(c.short(case.id)), c.pct(case.score), link)
    return Padding(table, (0, 0, 0, 2))


def _findings(d: Diagnosis) -> RenderableType:
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
    table.add_column("kind", no_wrap=True, style="bold")
    table.add_column("ranks", overflow="fold", max_width=24)
    table.add_column("summary", overflow="fold")
    for f in d.findings[:30]:
        table.add_row(Text(c.short(f.kind)), Text(c.ranks_str(f.ranks)), Text(c.short(f.summary)))
    rest = len(d.findings) - 30
    note = [Text(f"{rest} more findings in the JSON", style="dim")] if rest > 0 else []
    return Padding(Group(table, *note), (0, 0, 0, 2))


def _timeline(d: Diagnosis) -> RenderableType:
    capped = c.cap_timeline(d.timeline, TIMELINE_ROWS)
    base = c.base_dir(d)
    span = c.time_span(d.timeline)
    start = span[0] if span else None
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
    table.add_column("time", no_wrap=True)
    table.add_column("rank", justify="right", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("what", overflow="fold")
    for _, e in capped.rows:
        style = _ROLE_STYLE.get(e.role, "")
        when = c.clock_time(e.time)
        if start is not None and e.time is not None:
            when += f" {c.offset(e.time, start)}"
        what = Text(c.one_line(e.text, 160))
        what.append(f"  {c.short(c.where(e.source, e.line, base))}", style="dim")
        table.add_row(when, c.rank_str(e.rank), Text(c.short(e.role, 20)), what, style=style)
    note = [Text(capped.note(), style="dim")] if capped.hidden else []
    return Padding(Group(table, *note), (0, 0, 0, 2))


def _inputs(d: Diagnosis) -> RenderableType:
    if not d.inputs:
        return Padding(Text("no inputs were read", style="bold yellow"), (0, 0, 0, 2))
    ordered = c.inputs_in_order(d.inputs)
    base = c.base_dir(d)
    parts: list[RenderableType] = [Text(c.short(c.inputs_overview(d.inputs, base)), style="dim")]
    warned = [i for i in ordered if i.warnings]
    for i in warned[:INPUT_ROWS]:
        # Warnings come first and loud: what an unreadable input held is missing from the
        # diagnosis, and the reader must know that before trusting it.
        parts.append(Text(f"! {c.short(c.rel(i.path, base))}", style="bold yellow"))
        parts.append(
            Padding(
                _bullets([Text(c.short(w), style="yellow") for w in i.warnings], "-"),
                (0, 0, 0, 4),
            )
        )
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
    if warned:
        table.add_column("", no_wrap=True, style="bold yellow")
    table.add_column("path", overflow="fold")
    table.add_column("kind", no_wrap=True)
    table.add_column("rank", justify="right", no_wrap=True)
    table.add_column("host", overflow="fold", max_width=20)
    table.add_column("events", justify="right", no_wrap=True)
    for i in ordered[:INPUT_ROWS]:
        flag = ["!" if i.warnings else ""] if warned else []
        table.add_row(
            *flag,
            Text(c.short(c.rel(i.path, base))),
            i.kind.value,
            c.rank_str(i.rank),
            Text(c.short(i.host or "-")),
            str(i.events),
        )
    parts.append(table)
    if len(ordered) > INPUT_ROWS:
        parts.append(Text(f"{len(ordered) - INPUT_ROWS} more inputs in the JSON", style="dim"))
    return Padding(Group(*parts), (0, 0, 0, 2))
