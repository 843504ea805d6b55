"""The terminal report: rich panels and tables, colour on a TTY, plain text everywhere else.

The first screen is the answer: the verdict, who started it, and the fixes worth trying; the
detail (evidence, stacks, flight recorder, timeline, inputs) follows under "Details". `--brief`
is the answer alone, in four lines, for chat and scripts.

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

from triage.model import Diagnosis

from . import common as c
from .view import build
from .view_model import Action, Label, ReportView
from .wording import TITLES

TIMELINE_ROWS = 40
PROBLEM_ROWS = 30
EVIDENCE_ITEMS = 12
EVIDENCE_LINES = 14
FIRST_FAILURE_LINES = 8
ACTIONS = 3  # per fix on the first screen; the JSON, Markdown and HTML have them all
FINDINGS = 30
WIDTH = 100

_ROLE_STYLE = {"initiating": "bold red", "cascade": "dim", "context": ""}


def _console(width: int) -> tuple[Console, io.StringIO]:
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
    return console, out


def _plain_text(out: io.StringIO) -> str:
    # Trailing spaces pad table cells to the width; they are noise in a pasted report.
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def render_text(d: Diagnosis, width: int = WIDTH) -> str:
    """The report as plain text (no colour, no escape codes), `width` columns wide."""
    console, out = _console(width)
    print_report(d, console)
    return _plain_text(out)


def render_brief(d: Diagnosis, width: int = WIDTH) -> str:
    """The short form as plain text: verdict, culprit, top fix, one line of evidence."""
    console, out = _console(width)
    print_brief(d, console)
    return _plain_text(out)


def print_report(d: Diagnosis, console: Console) -> None:
    plain = console.no_color or console.color_system is None
    for part in renderables(build(d), plain=plain):
        console.print(part)


def print_brief(d: Diagnosis, console: Console) -> None:
    plain = console.no_color or console.color_system is None
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    view = build(d)
    for key, value in view.brief():
        style = _verdict_style(view) if key == "triage" else ""
        body = _action(value, plain) if key in ("fix", "collect") else Text(value, style=style)
        grid.add_row(f"{key}:", body)
    console.print(grid)


def renderables(v: ReportView, plain: bool = False) -> Iterable[RenderableType]:
    yield _headline(v)
    if v.unreadable:
        noun = "input" if v.unreadable == 1 else "inputs"
        yield Text(
            f"! {v.unreadable} {noun} could not be read completely; see Inputs below.",
            style="bold yellow",
        )
    if v.abstain:
        yield _section(TITLES.collect_next)
        yield Padding(_bullets([_action(a.text, plain) for a in v.collect_next]), (0, 0, 0, 2))
    if v.fixes:
        yield _section(TITLES.fixes)
        yield _fixes(v, plain)
    details = list(_details(v))
    if details:
        yield Text("")
        yield Rule(Text(TITLES.details, style="bold"), style="cyan", characters="═")
        yield from details


def _details(v: ReportView) -> Iterable[RenderableType]:
    first = v.who.first if v.who is not None else None
    if first is not None and first.text:
        yield _section(first.title)
        yield _first_failure(v)
    if v.evidence:
        yield _section(TITLES.evidence)
        yield _evidence(v)
    if v.stacks:
        yield _section(TITLES.stacks)
        yield _stacks(v)
    if v.progress:
        yield _section(TITLES.flight_recorder)
        yield _progress(v)
    if v.similar:
        yield _section(TITLES.similar)
        yield _similar(v)
    if v.findings:
        yield _section(TITLES.findings)
        yield _findings(v)
    if v.timeline.rows:
        yield _section(TITLES.timeline)
        yield _timeline(v)
    yield _section(TITLES.inputs)
    yield _inputs(v)


# --------------------------------------------------------------------------- parts


def _section(title: str) -> RenderableType:
    return Group(Text(""), Rule(Text(title, style="bold"), align="left", style="cyan"))


_OUTCOME_STYLES = {
    "succeeded": "bold green",
    "stopped": "bold blue",
    "incomplete": "bold blue",
    "failed": "bold red",
    "hung": "bold red",
    "unknown": "bold yellow",
}


def _verdict_style(v: ReportView) -> str:
    if v.abstain:
        return "bold yellow"
    if v.outcome is not None and not v.symptoms and not v.root_causes:
        return _OUTCOME_STYLES.get(v.outcome.id, "bold")
    return "bold red"


def _headline(v: ReportView) -> Panel:
    body: list[RenderableType] = []
    if v.outcome is not None:
        # what became of the job comes first, then what failed (if anything did)
        line = Text("Job: ", style="bold")
        line.append(v.outcome.word, style=_OUTCOME_STYLES.get(v.outcome.id, "bold"))
        if v.outcome.why:
            line.append(f" ({c.lower_first(v.outcome.why)})")
        body.append(line)
        # the lines that show it, when no failure below quotes its own
        shown = v.outcome.evidence[:2] if not (v.symptoms or v.root_causes) else ()
        for where, text in shown:
            body.append(Text(f"  {where}: {text}" if where else f"  {text}", style="dim"))
    body.append(Text(v.verdict, style=_verdict_style(v)))
    if not v.ended_well:  # else the summary says what the outcome line already said
        body.append(Text(v.summary))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_column(justify="right")
    for title, labels in (("Symptom", v.symptoms), ("Root cause", v.root_causes)):
        for n, label in enumerate(labels):
            grid.add_row(title if n == 0 else "", _label(label, n > 0), _pct(label, n > 0))
    if v.stage:
        grid.add_row("Stage", Text(v.stage), "")
    who = v.who
    if who is not None:
        culprit = who.culprit_line()
        if culprit:
            grid.add_row("Culprit", Text(culprit, style="bold red"), "")
        if who.first is not None and who.first.note:
            grid.add_row("", Text(who.first.note, style="dim"), "")
        if who.hang is not None:
            grid.add_row("Hang", Text(who.hang.headline), "")
            if who.hang.collective:
                grid.add_row("", Text(f"collective: {who.hang.collective}", style="dim"), "")
    if grid.row_count:
        body += [Text(""), grid]
    return Panel(Group(*body), title="triage", title_align="left", box=box.ROUNDED)


def _label(label: Label, dim: bool) -> Text:
    return Text(f"{label.id} {label.name}", style="dim" if dim else "")


def _pct(label: Label, dim: bool) -> Text:
    return Text(label.pct + (" (tied)" if label.tied else ""), style="dim" if dim else "bold")


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


def _fixes(v: ReportView, plain: bool) -> RenderableType:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, style="bold")
    grid.add_column(overflow="fold")
    for n, fix in enumerate(v.fixes, 1):
        head = Text(f"{fix.id} {fix.name}", style="bold")
        head.append(f"  {fix.pct}" + (" (tied)" if fix.tied else ""), style="dim")
        body: list[RenderableType] = [head]
        actions: list[Action] = list(fix.actions[:ACTIONS])
        if actions:
            body.append(_bullets([_action(a.text, plain) for a in actions]))
        if len(fix.actions) > ACTIONS:
            more = len(fix.actions) - ACTIONS
            body.append(Text(f"  + {more} more in the JSON / HTML report", style="dim"))
        if fix.why:
            body.append(Text(f"why: {fix.why}", style="dim italic"))
        grid.add_row(f"{n}.", Group(*body))
    parts: list[RenderableType] = [grid]
    if v.fixes_hidden:
        noun = "pattern" if v.fixes_hidden == 1 else "patterns"
        parts.append(
            Text(f"{v.fixes_hidden} less likely fix {noun} in the JSON report", style="dim")
        )
    return Padding(Group(*parts), (0, 0, 0, 2))


def _first_failure(v: ReportView) -> RenderableType:
    assert v.who is not None and v.who.first is not None
    f = v.who.first
    head = Text(f.label, style="bold red")
    if f.host:
        head.append(f" on {f.host}")
    if f.time:
        head.append(f" at {f.time}")
    head.append(f"  ({f.where})", style="dim")
    text, hidden = c.cut_lines(f.text, FIRST_FAILURE_LINES)
    block = Text(text)
    if hidden:
        block.append(f"\n… {hidden} more lines", style="dim")
    parts: list[RenderableType] = [head, Padding(block, (0, 0, 0, 2))]
    if v.who.hang is not None and v.who.hang.explanation:
        parts.append(Text(v.who.hang.explanation, style="dim"))
    return Padding(Group(*parts), (0, 0, 0, 2))


def _evidence(v: ReportView) -> RenderableType:
    parts: list[RenderableType] = []
    for e in v.evidence[:EVIDENCE_ITEMS]:
        head = Text(e.where, style="bold")
        head.append(f"  {e.who}")
        if e.count > 1:
            head.append(f" ({e.count} lines{', details differ' if e.varies else ''})")
        if e.why:
            head.append(f"  why: {e.why}", style="dim")
        text, hidden = c.cut_lines(e.text, EVIDENCE_LINES)
        body = Text(text)
        if hidden:
            body.append(f"\n… {hidden} more lines", style="dim")
        parts += [head, Padding(body, (0, 0, 0, 4))]
    if len(v.evidence) > EVIDENCE_ITEMS:
        parts.append(Text(f"{len(v.evidence) - EVIDENCE_ITEMS} more in the JSON", style="dim"))
    return Padding(Group(*parts), (0, 0, 0, 2))


def _stacks(v: ReportView) -> RenderableType:
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
    table.add_column("ranks", overflow="fold", max_width=24)
    table.add_column("main thread, innermost first", overflow="fold")
    table.add_column("", no_wrap=True)
    for s in v.stacks:
        frames = "\n".join(s.frames[:4]) or s.top
        mark = "← odd one out" if s.outlier else "← the culprit" if s.culprit else ""
        mark = f"{mark} ({s.waits})".strip() if s.waits else mark
        style = "bold red" if s.outlier or s.culprit else ""
        table.add_row(Text(s.ranks, style=style), Text(frames), Text(mark, style=style))
    return Padding(table, (0, 0, 0, 2))


def _progress(v: ReportView) -> RenderableType:
    parts: list[RenderableType] = []
    for t in v.progress:
        head = Text(f"process group {t.group}", style="bold")
        if t.stuck:
            head.append(f"  {t.stuck}", style="dim")
        table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
        table.add_column("ranks", overflow="fold", max_width=30)
        table.add_column("entered", justify="right")
        if t.states_known:
            table.add_column("started", justify="right")
            table.add_column("completed", justify="right")
        table.add_column("", no_wrap=True)
        for r in t.rows:
            cells = [r.enqueued, r.started, r.completed] if t.states_known else [r.enqueued]
            mark = f"← {r.note}" if r.outlier and r.note else ""
            table.add_row(Text(r.ranks), *cells, Text(mark), style="bold red" if r.outlier else "")
        parts += [head, table]
    return Padding(Group(*parts), (0, 0, 0, 2))


def _similar(v: ReportView) -> RenderableType:
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
    table.add_column("case", no_wrap=True)
    table.add_column("match", justify="right")
    table.add_column("link", overflow="fold")
    for case in v.similar[:10]:
        link = Text(case.url or "-", style=f"link {case.url}" if case.url else "")
        table.add_row(Text(case.id), case.pct, link)
    return Padding(table, (0, 0, 0, 2))


def _findings(v: ReportView) -> RenderableType:
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
    table.add_column("kind", no_wrap=True, style="bold")
    table.add_column("ranks", overflow="fold", max_width=24)
    table.add_column("summary", overflow="fold")
    for f in v.findings[:FINDINGS]:
        table.add_row(Text(f.kind), Text(f.ranks), Text(f.summary))
    rest = len(v.findings) - FINDINGS
    note = [Text(f"{rest} more findings in the JSON", style="dim")] if rest > 0 else []
    return Padding(Group(table, *note), (0, 0, 0, 2))


def _timeline(v: ReportView) -> RenderableType:
    rows, note = v.timeline.capped(TIMELINE_ROWS)
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
    table.add_column("time", no_wrap=True)
    table.add_column("rank", justify="right", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("what", overflow="fold")
    for r in rows:
        # a line without a stamp: its bounds under it, one per line, keep the column narrow
        when = f"{r.clock} {r.offset}".strip() if r.iso != r.offset else f"{r.clock}\n{r.offset}"
        when = when.replace(", before", "\nbefore")
        what = Text(c.one_line(r.text, 160))
        what.append(f"  {r.where}", style="dim")
        table.add_row(when, r.rank, Text(r.role), what, style=_ROLE_STYLE.get(r.role, ""))
    extra = [Text(note, style="dim")] if note else []
    return Padding(Group(table, *extra), (0, 0, 0, 2))


def _inputs(v: ReportView) -> RenderableType:
    if not v.inputs.groups:
        return Padding(Text("no inputs were read", style="bold yellow"), (0, 0, 0, 2))
    parts: list[RenderableType] = [Text(v.inputs.overview, style="dim")]
    for p in v.inputs.problems[:PROBLEM_ROWS]:
        # Problems come first and loud: what an unreadable input held is missing from the
        # diagnosis, and the reader must know that before trusting it.
        parts.append(Text(f"! {p.path}", style="bold yellow"))
        parts.append(Padding(_bullets([Text(w, style="yellow") for w in p.warnings]), (0, 0, 0, 4)))
    if len(v.inputs.problems) > PROBLEM_ROWS:
        more = len(v.inputs.problems) - PROBLEM_ROWS
        parts.append(Text(f"{more} more inputs with problems in the JSON", style="dim"))
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
    table.add_column("kind", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("count", justify="right", no_wrap=True)
    table.add_column("ranks", overflow="fold", max_width=24)
    table.add_column("e.g.", overflow="fold")
    for g in v.inputs.groups:
        status = g.status_said
        table.add_row(
            g.kind,
            Text(status, style="bold yellow" if g.status == "problem" else ""),
            str(g.count),
            Text(g.ranks or "-"),
            Text(g.example),
        )
    parts.append(table)
    return Padding(Group(*parts), (0, 0, 0, 2))
