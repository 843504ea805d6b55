"""Command line: parses options and calls one library function per command.

triage PATH... [-o OUT] [--format text|json|md|html] [--brief] [--no-embed] [-q]
triage explain [TEXT...] | --jsonl
triage rules list | check X
triage index build
triage batch DIR_OF_JOBS -o results.jsonl

Exit codes: 0 a finished diagnosis (even "unknown"), 1 an internal failure, 2 a usage error,
3 no evidence at all was found (EXIT_NO_EVIDENCE).
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import click

FORMATS = ("text", "json", "md", "html")
_SUFFIX_FORMATS = {
    ".json": "json",
    ".md": "md",
    ".markdown": "md",
    ".html": "html",
    ".htm": "html",
    ".txt": "text",
    ".text": "text",
}
# The run finished but no input held anything to diagnose: scripts tell it from a diagnosis.
EXIT_NO_EVIDENCE = 3
EXIT_CODES = (
    "Exit codes: 0 diagnosed (even when the cause is unknown), 1 internal failure, 2 usage "
    f"error, {EXIT_NO_EVIDENCE} no evidence found in the inputs."
)


# Options several commands share, declared once.
_rules_option = click.option(
    "--rules",
    "rules",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    help="Add a folder of your own rules (repeatable).",
)
_no_embed_option = click.option(
    "--no-embed",
    is_flag=True,
    help="Never load the embedding model: rules, cross-rank analysis and TF-IDF neighbours only.",
)
_fr_entries_option = click.option(
    "--fr-entries",
    "fr_entries",
    type=click.IntRange(min=0),
    default=None,
    help="Flight-recorder entries to read per dump: 0 reads all (default: all, or the last "
    "128 of each when a big job's dumps add up to over 16 MiB).",
)
_output_option = click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(dir_okay=False),
    help="Write the report to FILE; its suffix picks the format (.html, .json, .md, .txt).",
)
_format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    help="Report format (default: from -o's suffix, else text).",
)
_brief_option = click.option(
    "--brief",
    is_flag=True,
    help="Only the verdict, the culprit, the top fix and one line of evidence (text, md).",
)
_ROUTED = "triage.paths"  # ctx.meta key: the arguments of `triage PATH...`


class _DefaultToAnalyze(click.Group):
    """`triage PATH...` diagnoses PATH; named subcommands run as usual.

    The main command is the group's own: `triage --help` lists its options next to the
    commands, and its usage errors name `triage`, not an internal subcommand.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        first = next((a for a in args if not a.startswith("-")), None)
        wants_help = not args or args[0] in ("--help", "-h", "--version")
        if not wants_help and (first is None or first not in self.commands):
            ctx.meta[_ROUTED] = args
            return []
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        routed = ctx.meta.pop(_ROUTED, None)
        if routed is None:
            return super().invoke(ctx)
        # A root context named like the program: usage lines and hints read `triage ...`.
        with analyze.make_context(ctx.info_name or "triage", routed) as sub_ctx:
            return analyze.invoke(sub_ctx)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "[OPTIONS] PATH...")
        formatter.write_usage(ctx.command_path, "COMMAND [ARGS]...", prefix="       ")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # the main command's options, then the group's own (--version, --help)
        help_option = analyze.get_help_option(ctx)
        mine = [
            p.get_help_record(ctx)
            for p in analyze.get_params(ctx)
            if isinstance(p, click.Option) and p is not help_option
        ]
        own = [p.get_help_record(ctx) for p in self.get_params(ctx)]
        with formatter.section("Options"):
            formatter.write_dl([r for r in (*mine, *own) if r is not None])
        self.format_commands(ctx, formatter)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_paragraph()
        formatter.write_text(EXIT_CODES)


@click.group(
    cls=_DefaultToAnalyze,
    invoke_without_command=True,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="triage")
def main() -> None:
    """Diagnose a crashed or hung distributed training job.

    `triage logs/ -o report.html` reads every rank's logs, NCCL output, py-spy and
    flight-recorder dumps under logs/ (files, folders, .tar.gz, .zip) and says what happened,
    why, which rank started it, and what to do.
    """


def _options(no_embed: bool, rules: tuple[str, ...], fr_entries: int | None = None) -> Any:
    from triage.pipeline import Options

    _check_rules(rules)
    return Options(
        use_embeddings=not no_embed, extra_rules_dirs=tuple(rules), fr_entries=fr_entries
    )


def _check_rules(extra: tuple[str, ...]) -> None:
    """A broken rule file is the user's to fix: say which file and rule, exit 2."""
    if not extra:
        return
    from triage.classify import rules as engine

    try:
        engine.load(extra)
    except engine.RuleError as exc:
        raise click.UsageError(str(exc)) from exc


def _pick_format(fmt: str | None, out: str | None, brief: bool = False) -> str:
    """The report format, checked before any work is done: a typo costs no minutes."""
    if out:
        path = Path(out)
        folder = path.parent
        if not folder.is_dir():
            raise click.BadParameter(
                f"cannot write {out}: the folder {folder} does not exist", param_hint="-o"
            )
        if path.is_dir():
            raise click.BadParameter(f"{out} is a folder; give a file name", param_hint="-o")
    if not fmt and out:
        fmt = _SUFFIX_FORMATS.get(Path(out).suffix.lower())
        if fmt is None:
            raise click.BadParameter(
                f"cannot tell the report format from {Path(out).name!r}: name it .html, .json, "
                f".md or .txt, or give --format {'|'.join(FORMATS)}",
                param_hint="-o",
            )
    fmt = fmt or "text"
    if brief and fmt not in ("text", "md"):
        raise click.BadParameter(f"the brief form is text or md, not {fmt}", param_hint="--brief")
    return fmt


def _emit(diagnosis: Any, fmt: str, out: str | None, quiet: bool, brief: bool = False) -> None:
    from triage import report

    if out:
        try:
            Path(out).write_text(report.render(diagnosis, fmt, brief), encoding="utf-8")
        except OSError as exc:
            raise click.BadParameter(
                f"cannot write {out}: {exc.strerror or exc}", param_hint="-o"
            ) from exc
        if not quiet:
            click.echo(f"{diagnosis.summary}\nreport written to {out}", err=True)
    elif fmt == "text" and sys.stdout.isatty():
        from rich.console import Console

        report.render_to_console(diagnosis, Console(), brief)
    else:
        click.echo(report.render(diagnosis, fmt, brief), nl=not brief)
    if not diagnosis.evidence_found:
        # a distinct code: scripts tell "diagnosed" from "there was nothing to read"
        raise click.exceptions.Exit(EXIT_NO_EVIDENCE)


@main.command("analyze", hidden=True)
@click.argument("paths", nargs=-1, required=True, type=click.Path(), metavar="PATH...")
@_output_option
@_format_option
@_brief_option
@_no_embed_option
@_rules_option
@_fr_entries_option
@click.option("-q", "--quiet", is_flag=True, help="No progress bar, no messages on stderr.")
def analyze(
    paths: tuple[str, ...],
    out: str | None,
    fmt: str | None,
    brief: bool,
    no_embed: bool,
    rules: tuple[str, ...],
    fr_entries: int | None,
    quiet: bool,
) -> None:
    """Diagnose the failure bundle(s) at PATHS (files, folders, .tar.gz, .zip)."""
    from triage import pipeline

    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise click.BadParameter(f"no such file or folder: {', '.join(missing)}", param_hint="PATH")
    fmt = _pick_format(fmt, out, brief)
    options = _options(no_embed, rules, fr_entries)
    with _Progress(enabled=not quiet, model=options.use_embeddings) as progress:
        diagnosis = pipeline.diagnose(paths, options, progress.update)
    # This process ends right after: the GC need not walk what was read once more at exit
    # (~0.1 s on a 1,024-rank bundle).
    gc.freeze()
    _emit(diagnosis, fmt, out, quiet, brief)


@main.command()
@click.argument("text", nargs=-1)
@click.option(
    "--jsonl",
    is_flag=True,
    help='Batch: stdin lines {"id":..,"text":..} -> stdout lines {"id":..,"diagnosis":{..}}.',
)
@_output_option
@_format_option
@_brief_option
@_no_embed_option
@_rules_option
@click.option("-q", "--quiet", is_flag=True, help="No spinner, no messages on stderr.")
def explain(
    text: tuple[str, ...],
    jsonl: bool,
    out: str | None,
    fmt: str | None,
    brief: bool,
    no_embed: bool,
    rules: tuple[str, ...],
    quiet: bool,
) -> None:
    """Diagnose a pasted error (TEXT, or stdin when no TEXT is given)."""
    from triage import pipeline

    options = _options(no_embed, rules)
    if jsonl:
        _explain_jsonl(options)
        return
    fmt = _pick_format(fmt, out, brief)
    body = " ".join(text) if text else sys.stdin.read()
    if not body.strip():
        raise click.UsageError("nothing to explain: give the error text as arguments or on stdin")
    with _Spinner(not quiet, _working_on("the error", options.use_embeddings)):
        diagnosis = pipeline.explain(body, options)
    _emit(diagnosis, fmt, out, quiet, brief)


def _explain_jsonl(options: Any) -> None:
    """One output line per input line, in input order; a bad line gets an `error`."""
    from triage import pipeline

    rows: list[tuple[Any, str | None, str | None]] = []  # (id, text, error)
    for number, line in enumerate(sys.stdin, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            if not isinstance(item, dict) or not isinstance(item.get("text"), str):
                raise ValueError('expected an object with a string "text"')
            rows.append((item.get("id"), item["text"], None))
        except ValueError as exc:
            rows.append((None, None, f"line {number}: {exc}"))
    texts = [t for _, t, _ in rows if t is not None]
    diagnoses = iter(pipeline.explain_many(texts, options))
    for case_id, text, error in rows:
        if text is None:
            click.echo(json.dumps({"id": case_id, "error": error}))
        else:
            click.echo(json.dumps({"id": case_id, "diagnosis": next(diagnoses).to_dict()}))


@main.group()
def rules() -> None:
    """See and test the rules."""


@rules.command("list")
@_rules_option
def rules_list(rules: tuple[str, ...]) -> None:
    """List every rule: id, title, what it concludes."""
    from triage.classify import rules as engine

    _check_rules(rules)
    for rule in engine.list_rules(rules):
        click.echo(engine.describe(rule))


@rules.command("check")
@click.argument("file_or_text")
@_rules_option
def rules_check(file_or_text: str, rules: tuple[str, ...]) -> None:
    """Show which rules match FILE_OR_TEXT, and the lines they quote."""
    from triage import pipeline

    _check_rules(rules)
    hits = pipeline.check_rules(file_or_text, rules)
    if not hits:
        click.echo("no rule matched")
    for hit in hits:
        where = f" (line {hit.evidence_line})" if hit.evidence_line else ""
        click.echo(f"{hit.rule_id}: {hit.title}{where}\n    {hit.evidence_text.strip()}")


@main.group()
def index() -> None:
    """The nearest-neighbour index in models/."""


@index.command("build")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    help="Where to write the index (default: models/).",
)
def index_build(out_dir: str | None) -> None:
    """Rebuild the nearest-neighbour index from the reference cases."""
    from triage.knowledge import build

    path = build.build_index(out_dir=out_dir)
    click.echo(f"index written to {path}")


@main.command()
@click.argument("jobs_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "-o",
    "--output",
    "out",
    required=True,
    type=click.Path(dir_okay=False),
    help="JSON lines, one per job.",
)
@click.option(
    "-j",
    "--jobs",
    "workers",
    type=int,
    default=None,
    help="Parallel processes (default: all cores).",
)
@_no_embed_option
@_rules_option
@_fr_entries_option
def batch(
    jobs_dir: str,
    out: str,
    workers: int | None,
    no_embed: bool,
    rules: tuple[str, ...],
    fr_entries: int | None,
) -> None:
    """Diagnose every job (sub-folder or archive) in JOBS_DIR; one JSON line per job."""
    from triage import batch as batch_runner

    jobs = batch_runner.job_paths(jobs_dir)
    options = _options(no_embed, rules, fr_entries)
    if not Path(out).parent.is_dir():
        raise click.BadParameter(
            f"cannot write {out}: the folder {Path(out).parent} does not exist", param_hint="-o"
        )
    with open(out, "w", encoding="utf-8") as fh, _BatchProgress(len(jobs)) as progress:
        count = batch_runner.run_batch(jobs, fh, options, workers, on_row=progress.row)
    click.echo(f"{count} jobs diagnosed, results in {out}", err=True)


def _working_on(what: str, embeddings: bool) -> str:
    from triage.classify import neighbours

    if embeddings and not neighbours.model_loaded():
        return f"diagnosing {what} (loading the similarity model: a few seconds the first time)"
    return f"diagnosing {what}"


class _Spinner:
    """A transient spinner line on stderr while work of unknown length runs; terminals only.

    rich draws it from a thread of its own: never start one while parser workers may be
    forked (`pipeline.default_workers` reads from one process only when it has no threads).
    """

    def __init__(self, enabled: bool, message: str) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.message = message
        self.status: Any = None

    def __enter__(self) -> _Spinner:
        if self.enabled:
            from rich.console import Console

            self.status = Console(stderr=True).status(self.message, spinner="dots")
            self.status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


class _BatchProgress:
    """Per-job progress of `triage batch` on a terminal: done/total and the last job's answer."""

    def __init__(self, total: int) -> None:
        self.enabled = sys.stderr.isatty() and total > 0
        self.total = total
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> _BatchProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            # No refresh thread: the batch forks its worker processes after this, and a
            # process that forks while another thread holds a lock can deadlock the children.
            self.bar = Progress(
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                console=Console(stderr=True),
                transient=True,
                auto_refresh=False,
            )
            self.bar.start()
            self.task = self.bar.add_task("jobs", total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def row(self, row: dict[str, Any]) -> None:
        """`run_batch`'s callback: one finished job (`{"job", "diagnosis"|"error"}`)."""
        if self.bar is None:
            return
        name = Path(str(row.get("job", ""))).name
        if "error" in row:
            said = f"error: {str(row['error'])[:60]}"
        else:
            d = row.get("diagnosis") or {}
            labels = d.get("root_causes") or d.get("symptoms") or []
            said = f"{labels[0]['id']} {labels[0]['name']}" if labels else "no cause named"
        self.bar.console.print(f"{name}: {said}", highlight=False, markup=False)
        self.bar.update(self.task, advance=1, description=name)
        self.bar.refresh()


class _Progress:
    """A rich progress line on stderr, shown only when reading takes more than a second;
    then a spinner while the later stages run (loading the similarity model takes seconds)."""

    def __init__(self, enabled: bool, model: bool = False) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.model = model
        self.started = time.monotonic()
        self.bar: Any = None
        self.task: Any = None
        self.spinner: _Spinner | None = None

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
        if self.spinner is not None:
            self.spinner.__exit__()

    def update(self, sources: int, done_bytes: int, path: str) -> None:
        """`read_inputs`' progress callback; an empty path means reading is over."""
        if not self.enabled:
            return
        if not path:
            self.enabled = False
            if self.bar is not None:
                self.bar.stop()
                self.bar = None
            # reading is over and its workers are gone: a spinner thread is safe now
            self.spinner = _Spinner(True, _working_on(f"{sources} inputs", self.model))
            self.spinner.__enter__()
            return
        if self.bar is None:
            if time.monotonic() - self.started < 1.0:
                return
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("reading")
        mib = done_bytes / 2**20
        self.bar.update(self.task, description=f"read {sources} inputs, {mib:,.0f} MiB  {path}")


def run() -> None:
    """Entry point that turns unexpected errors into exit code 1 with a short message."""
    try:
        # without standalone mode click hands back an `Exit`'s code instead of raising it
        code = main(standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # noqa: BLE001 - the contract: internal failure -> exit 1
        from triage.knowledge.problems import KnowledgeError

        if isinstance(exc, KnowledgeError):
            # a broken or missing rules/ or models/: every problem, so one fix does it
            click.echo(f"triage: the knowledge base cannot be used:\n{exc}", err=True)
        else:
            click.echo(f"triage: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(1)
