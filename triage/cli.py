"""Command line: parses options and calls one library function per command.

triage PATH... [-o OUT] [--format text|json|md|html] [--no-embed] [-q]
triage explain [TEXT...] | --jsonl
triage rules list | check X
triage index build
triage batch DIR_OF_JOBS -o results.jsonl
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
_SUFFIX_FORMATS = {".json": "json", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html"}


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
    help="Write the report here; the suffix picks the format (.html, .json, .md).",
)
_format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    help="Report format (default: from -o's suffix, else text).",
)


class _DefaultToAnalyze(click.Group):
    """`triage PATH...` runs `analyze`; named subcommands run as usual."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        first = next((a for a in args if not a.startswith("-")), None)
        wants_help = not args or args[0] in ("--help", "-h", "--version")
        if not wants_help and (first is None or first not in self.commands):
            args = ["analyze", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultToAnalyze, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="triage")
def main() -> None:
    """Diagnose a crashed or hung distributed training job.

    `triage logs/ -o report.html` reads every rank's logs, NCCL output, py-spy and
    flight-recorder dumps under logs/ and says what happened, why, which rank started it,
    and what to do.
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


def _pick_format(fmt: str | None, out: str | None) -> str:
    if fmt:
        return fmt
    if out:
        return _SUFFIX_FORMATS.get(Path(out).suffix.lower(), "text")
    return "text"


def _emit(diagnosis: Any, fmt: str, out: str | None, quiet: bool) -> None:
    from triage import report

    if out:
        Path(out).write_text(report.render(diagnosis, fmt), encoding="utf-8")
        if not quiet:
            click.echo(f"{diagnosis.summary}\nreport written to {out}", err=True)
        return
    if fmt == "text" and sys.stdout.isatty():
        from rich.console import Console

        report.render_to_console(diagnosis, Console())
        return
    click.echo(report.render(diagnosis, fmt))


@main.command("analyze", hidden=True)
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@_output_option
@_format_option
@_no_embed_option
@_rules_option
@_fr_entries_option
@click.option("-q", "--quiet", is_flag=True, help="No progress bar, no messages on stderr.")
def analyze(
    paths: tuple[str, ...],
    out: str | None,
    fmt: str | None,
    no_embed: bool,
    rules: tuple[str, ...],
    fr_entries: int | None,
    quiet: bool,
) -> None:
    """Diagnose the failure bundle(s) at PATHS (files, folders, .tar.gz, .zip)."""
    from triage import pipeline

    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise click.BadParameter(
            f"no such file or folder: {', '.join(missing)}", param_hint="PATHS"
        )
    options = _options(no_embed, rules, fr_entries)
    _announce_model_load(quiet)
    with _Progress(enabled=not quiet) as progress:
        diagnosis = pipeline.diagnose(paths, options, progress.update)
    # This process ends right after: the GC need not walk what was read once more at exit
    # (~0.1 s on a 1,024-rank bundle).
    gc.freeze()
    _emit(diagnosis, _pick_format(fmt, out), out, quiet)


@main.command()
@click.argument("text", nargs=-1)
@click.option(
    "--jsonl",
    is_flag=True,
    help='Batch: stdin lines {"id":..,"text":..} -> stdout lines {"id":..,"diagnosis":{..}}.',
)
@_output_option
@_format_option
@_no_embed_option
@_rules_option
@click.option("-q", "--quiet", is_flag=True, help="No messages on stderr.")
def explain(
    text: tuple[str, ...],
    jsonl: bool,
    out: str | None,
    fmt: str | None,
    no_embed: bool,
    rules: tuple[str, ...],
    quiet: bool,
) -> None:
    """Diagnose a pasted error (TEXT, or stdin when no TEXT is given)."""
    from triage import pipeline

    options = _options(no_embed, rules)
    _announce_model_load(quiet)
    if jsonl:
        _explain_jsonl(options)
        return
    body = " ".join(text) if text else sys.stdin.read()
    if not body.strip():
        raise click.UsageError("nothing to explain: give the error text as arguments or on stdin")
    _emit(pipeline.explain(body, options), _pick_format(fmt, out), out, quiet)


def _stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def _announce_model_load(quiet: bool) -> None:
    """On a terminal, say so when the similarity model has to load (seconds, once): the rules
    did not settle the case. Never when the rules settle it, since it then does not load."""
    from triage.classify import neighbours

    neighbours.on_model_load(None)
    if quiet or not _stderr_is_terminal():
        return
    neighbours.on_model_load(lambda: click.echo("loading the similarity model…", err=True))


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
    from triage.classify import rules as engine

    _check_rules(rules)
    hits = engine.check(file_or_text, rules)
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
    from triage.classify import neighbours

    path = neighbours.build_index(out_dir=out_dir) if out_dir else neighbours.build_index()
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
    with open(out, "w", encoding="utf-8") as fh:
        options = _options(no_embed, rules, fr_entries)
        count = batch_runner.run_batch(jobs, fh, options, workers)
    click.echo(f"{count} jobs diagnosed, results in {out}", err=True)


class _Progress:
    """A rich progress line on stderr, shown only when reading takes more than a second."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.started = time.monotonic()
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def update(self, sources: int, done_bytes: int, path: str) -> None:
        """`read_inputs`' progress callback; an empty path means reading is over."""
        if not self.enabled:
            return
        if not path:
            self.enabled = False  # the later stages take a second at most: no bar for them
            if self.bar is not None:
                self.bar.stop()
                self.bar = None
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
        main(standalone_mode=False)
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
        click.echo(f"triage: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(1)
