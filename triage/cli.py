"""Command line: parses options and calls one library function per command.

triage PATH... [-o OUT] [--format text|json|md|html] [--brief] [--no-embed] [-q]
triage explain [TEXT...] | --jsonl
triage rules list | check X
triage index build
triage batch DIR_OF_JOBS -o results.jsonl [-j N] [--dask ADDRESS | --ray ADDRESS]
triage fleet DIR_OF_JOBS [-o report.html|.md|.json] [--db fleet.sqlite] [--dask A | --ray A]
triage snapshot [--pid PID | --all] -o DIR [--analyze]
triage doctor [--distributed] [--format text|json]
triage bot github|gitlab --event PATH [--api-url URL] [--dry-run]
triage serve --host H --port P [--api-url URL] [--config bot.yaml]

Exit codes: 0 a finished diagnosis (even "unknown"), 1 an internal failure, 2 a usage error,
3 no evidence at all was found (EXIT_NO_EVIDENCE), 130 interrupted by Ctrl-C.
"""

from __future__ import annotations

import gc
import json
import os
import re
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
# Stopped by Ctrl-C: 128 + SIGINT, as shells report a command the user interrupted.
EXIT_INTERRUPTED = 130
EXIT_CODES = (
    "Exit codes: 0 diagnosed (even when the cause is unknown), 1 internal failure, 2 usage "
    f"error, {EXIT_NO_EVIDENCE} no evidence found in the inputs, {EXIT_INTERRUPTED} "
    "interrupted (Ctrl-C)."
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
# where the many jobs of `batch` and `fleet` run
_jobs_option = click.option(
    "-j",
    "--jobs",
    "workers",
    type=click.IntRange(min=1),
    default=None,
    help="Parallel processes (default: all cores).",
)
_dask_option = click.option(
    "--dask",
    "dask_address",
    metavar="ADDRESS",
    help="Run the jobs on this Dask scheduler (tcp://host:8786; needs triage[dask]); every "
    "worker must see JOBS_DIR at the same path.",
)
_ray_option = click.option(
    "--ray",
    "ray_address",
    metavar="ADDRESS",
    help="Run the jobs on this Ray cluster (ray://host:10001 or auto; needs triage[ray]).",
)
_follow_links_option = click.option(
    "--follow-links",
    "follow_links",
    is_flag=True,
    help="Also read what symbolic links point to outside the paths given (default: such "
    "links are listed, not followed).",
)
_redact_hosts_option = click.option(
    "--redact-hosts",
    "redact_hosts",
    is_flag=True,
    help="Also replace e-mail addresses, IP addresses, host names and home-folder user names "
    "with stand-ins (<host-1>, <ip-1>...). Secrets are always masked.",
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


def _options(
    no_embed: bool,
    rules: tuple[str, ...],
    fr_entries: int | None = None,
    *,
    follow_links: bool = False,
    redact_hosts: bool = False,
) -> Any:
    from triage.pipeline import Options

    _check_rules(rules)
    return Options(
        use_embeddings=not no_embed,
        extra_rules_dirs=tuple(rules),
        fr_entries=fr_entries,
        follow_links=follow_links,
        redact_hosts=redact_hosts,
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
@_follow_links_option
@_redact_hosts_option
@click.option("-q", "--quiet", is_flag=True, help="No progress bar, no messages on stderr.")
def analyze(
    paths: tuple[str, ...],
    out: str | None,
    fmt: str | None,
    brief: bool,
    no_embed: bool,
    rules: tuple[str, ...],
    fr_entries: int | None,
    follow_links: bool,
    redact_hosts: bool,
    quiet: bool,
) -> None:
    """Diagnose the failure bundle(s) at PATHS (files, folders, .tar.gz, .zip)."""
    from triage import pipeline

    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise click.BadParameter(f"no such file or folder: {', '.join(missing)}", param_hint="PATH")
    _refuse_streams(paths)
    fmt = _pick_format(fmt, out, brief)
    options = _options(
        no_embed, rules, fr_entries, follow_links=follow_links, redact_hosts=redact_hosts
    )
    _announce_model_load(quiet, options.use_embeddings)
    with _Progress(enabled=not quiet, model=options.use_embeddings) as progress:
        diagnosis = pipeline.diagnose(paths, options, progress.update)
    # This process ends right after: the GC need not walk what was read once more at exit
    # (~0.1 s on a 1,024-rank bundle).
    gc.freeze()
    _emit(diagnosis, fmt, out, quiet, brief)


def _refuse_streams(paths: tuple[str, ...]) -> None:
    """A pipe named as a path (`triage <(cat log)`, a FIFO) is read once and cannot be
    sniffed and read again as a bundle's files are, so ingest leaves it unread: say so,
    and how to give it, instead of reporting that no evidence was found."""
    import stat

    for p in paths:
        try:
            mode = os.stat(p).st_mode
        except OSError:
            continue
        if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode):
            what = "a pipe" if stat.S_ISFIFO(mode) else "not a file or folder"
            raise click.BadParameter(
                f"{p} is {what} (process substitution `<(...)`, a FIFO or a device): triage "
                "reads files, folders and archives. Save it first (`cat job.log > job.txt; "
                "triage job.txt`) or pipe a pasted error to `triage explain`.",
                param_hint="PATH",
            )


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
@_redact_hosts_option
@click.option("-q", "--quiet", is_flag=True, help="No spinner, no messages on stderr.")
def explain(
    text: tuple[str, ...],
    jsonl: bool,
    out: str | None,
    fmt: str | None,
    brief: bool,
    no_embed: bool,
    rules: tuple[str, ...],
    redact_hosts: bool,
    quiet: bool,
) -> None:
    """Diagnose a pasted error (TEXT, or stdin when no TEXT is given)."""
    from triage import pipeline

    options = _options(no_embed, rules, redact_hosts=redact_hosts)
    _announce_model_load(quiet, options.use_embeddings)
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


def _stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def _announce_model_load(quiet: bool, embed: bool = True) -> None:
    """On a terminal, say so when the similarity model has to load (seconds, once): the rules
    did not settle the case. Never when the rules settle it, since it then does not load.

    Only then is the classifier imported here: otherwise it loads while the workers parse
    (`pipeline.warm_later_stages`), not before they can start (~0.15 s of every run)."""
    loaded = sys.modules.get("triage.classify.neighbours")
    if loaded is not None:  # an earlier command in this process (tests, a batch) left one
        loaded.on_model_load(None)
    if quiet or not embed or not _stderr_is_terminal():
        return
    from triage.classify import neighbours

    neighbours.on_model_load(_say_model_loads)


def _say_model_loads() -> None:
    """The running spinner says it (one line that goes away); without one, a line of its own."""
    if _Spinner.active is not None and _Spinner.active.status is not None:
        _Spinner.active.status.update(f"{_Spinner.active.message}: {_MODEL_LOADS}")
    else:
        click.echo(_MODEL_LOADS, err=True)


_MODEL_LOADS = "loading the similarity model… (a few seconds, once)"


def _explain_jsonl(options: Any) -> None:
    """One output line per input line, in input order, blank lines included; a line that is
    not `{"id": .., "text": ..}` gets an `error` (with its id when it had one). Lines are
    explained a block at a time, so output streams and memory stays bounded."""
    stdin = getattr(sys.stdin, "buffer", None)  # bytes: a line that is not UTF-8 is one row
    lines = stdin if stdin is not None else (line.encode() for line in sys.stdin)
    block: list[tuple[int, bytes]] = []
    for number, raw in enumerate(lines, start=1):
        block.append((number, raw))
        if len(block) >= _JSONL_BLOCK:
            _explain_block(block, options)
            block = []
    if block:
        _explain_block(block, options)


_JSONL_BLOCK = 256  # lines explained together (one embedding call), then written


def _explain_block(block: list[tuple[int, bytes]], options: Any) -> None:
    from triage import pipeline

    rows = [_jsonl_request(number, raw) for number, raw in block]
    texts = [text for _, text, _ in rows if text is not None]
    try:
        diagnoses: list[Any] = list(pipeline.explain_many(texts, options))
    except Exception:  # noqa: BLE001 - one text broke the batch: explain each on its own
        diagnoses = [_explain_one(text, options) for text in texts]
    answers = iter(diagnoses)
    for case_id, text, error in rows:
        if text is None:
            click.echo(_jsonl_row(case_id, "error", error))
            continue
        answer = next(answers)
        if isinstance(answer, str):
            click.echo(_jsonl_row(case_id, "error", answer))
        else:
            click.echo(_jsonl_row(case_id, "diagnosis", answer))


def _jsonl_request(number: int, raw: bytes) -> tuple[Any, str | None, str | None]:
    """(id, text, None) for a good line, (id or None, None, why) for a bad one."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, None, f"line {number}: not UTF-8 text"
    if not line.strip():
        return None, None, f"line {number}: blank line, nothing to explain"
    try:
        item = json.loads(line)
    except RecursionError:
        return None, None, f"line {number}: JSON nested too deep to read"
    except ValueError as exc:
        return None, None, f"line {number}: not JSON ({exc})"
    if not isinstance(item, dict):
        return None, None, f'line {number}: expected an object with a string "text"'
    case_id = item.get("id")
    if not isinstance(item.get("text"), str):
        return case_id, None, f'line {number}: expected an object with a string "text"'
    return case_id, item["text"], None


def _explain_one(text: str, options: Any) -> Any:
    """A Diagnosis, or the reason (a str) this one text could not be explained."""
    from triage import pipeline

    try:
        return pipeline.explain(text, options)
    except Exception as exc:  # noqa: BLE001 - contained to this line's row
        return f"internal error while explaining this line: {type(exc).__name__}"


def _jsonl_row(case_id: Any, key: str, value: Any) -> str:
    body = value.to_dict() if key == "diagnosis" else value
    try:
        return json.dumps({"id": case_id, key: body})
    except (RecursionError, ValueError, TypeError):
        try:
            return json.dumps({"id": None, key: body})
        except (RecursionError, ValueError, TypeError) as exc:
            why = f"the diagnosis could not be written as JSON ({type(exc).__name__})"
            return json.dumps({"id": None, "error": why})


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
    from triage.redact import redact_text

    _check_rules(rules)
    if not file_or_text.strip():
        # Path("") is the current folder: an empty argument must not scan it
        raise click.BadParameter(
            "nothing to check: give a file, a folder or the text of an error",
            param_hint="FILE_OR_TEXT",
        )
    if _looks_like_a_path(file_or_text) and not Path(file_or_text).exists():
        raise click.BadParameter(
            f"no such file or folder: {file_or_text} (quote an error's text to check it as text)",
            param_hint="FILE_OR_TEXT",
        )
    _refuse_streams((file_or_text,) if Path(file_or_text).exists() else ())
    hits = pipeline.check_rules(file_or_text, rules)
    if not hits:
        click.echo("no rule matched")
    for hit in hits:
        source = hit.event.source if hit.event is not None else ""
        if source and not source.startswith("<"):  # a file of the folder, not the pasted text
            where = f" ({source}:{hit.evidence_line})" if hit.evidence_line else f" ({source})"
        else:
            where = f" (line {hit.evidence_line})" if hit.evidence_line else ""
        quoted = redact_text(hit.evidence_text.strip())
        click.echo(f"{hit.rule_id}: {hit.title}{where}\n    {quoted}")


def _looks_like_a_path(arg: str) -> bool:
    """One word with a folder separator or a file suffix (`logs/`, `rank3.log`): meant as a
    path. An error's text has spaces, or no separator and no suffix."""
    if any(c.isspace() for c in arg):
        return False
    return "/" in arg or os.sep in arg or bool(re.search(r"\.[A-Za-z][\w]{0,7}$", arg))


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
    from importlib.util import find_spec

    from triage.knowledge import build

    if find_spec("sklearn") is None:  # it fits the TF-IDF space; the default install lacks it
        raise click.ClickException("building the index needs `pip install 'triage[build]'`")
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
@_jobs_option
@_dask_option
@_ray_option
@_no_embed_option
@_rules_option
@_fr_entries_option
@_follow_links_option
@_redact_hosts_option
def batch(
    jobs_dir: str,
    out: str,
    workers: int | None,
    dask_address: str | None,
    ray_address: str | None,
    no_embed: bool,
    rules: tuple[str, ...],
    fr_entries: int | None,
    follow_links: bool,
    redact_hosts: bool,
) -> None:
    """Diagnose every job (sub-folder or archive) in JOBS_DIR; one JSON line per job."""
    import os

    from triage import batch as batch_runner

    if dask_address is not None and ray_address is not None:
        raise click.UsageError("--dask and --ray: choose one cluster")
    try:
        batch_runner.check_cluster(dask=dask_address, ray=ray_address)
    except batch_runner.ClusterUnavailable as exc:
        raise click.UsageError(str(exc)) from None
    # Absolute paths: a cluster's workers read the jobs where they are (a shared filesystem).
    entries = batch_runner.job_entries(os.path.abspath(jobs_dir), follow_links=follow_links)
    options = _options(
        no_embed, rules, fr_entries, follow_links=follow_links, redact_hosts=redact_hosts
    )
    if not Path(out).parent.is_dir():
        raise click.BadParameter(
            f"cannot write {out}: the folder {Path(out).parent} does not exist", param_hint="-o"
        )
    with open(out, "w", encoding="utf-8") as fh, _BatchProgress(len(entries)) as progress:
        count = batch_runner.run_batch(
            entries,
            fh,
            options,
            workers,
            dask=dask_address,
            ray=ray_address,
            on_row=progress.row,
        )
    click.echo(f"{count} rows written to {out}", err=True)


@main.command()
@click.argument("jobs_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(dir_okay=False),
    help="Write the fleet report to FILE: .html, .md or .json (default: Markdown on stdout).",
)
@click.option("--format", "fmt", type=click.Choice(("html", "md", "json")), help="Report format.")
@click.option(
    "--db",
    "db_path",
    default="fleet.sqlite",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The SQLite history: jobs already in it (by content digest) are not read again.",
)
@_jobs_option
@_dask_option
@_ray_option
@_no_embed_option
@_rules_option
@_fr_entries_option
@_follow_links_option
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def fleet(
    jobs_dir: str,
    out: str | None,
    fmt: str | None,
    db_path: str,
    workers: int | None,
    dask_address: str | None,
    ray_address: str | None,
    no_embed: bool,
    rules: tuple[str, ...],
    fr_entries: int | None,
    follow_links: bool,
    quiet: bool,
) -> None:
    """Across jobs: add JOBS_DIR's new jobs to the history, report recurring failures and the
    hosts behind them."""
    from triage import fleet as fleet_lib
    from triage.fleet.render import render

    if dask_address and ray_address:
        raise click.UsageError("--dask and --ray: choose one cluster")
    fmt = fmt or (_SUFFIX_FORMATS.get(Path(out).suffix.lower()) if out else "md")
    if fmt not in ("html", "md", "json"):
        raise click.BadParameter(
            f"cannot tell the format of {out}: use .html, .md or .json, or --format",
            param_hint="-o",
        )
    if out and not Path(out).parent.is_dir():
        raise click.BadParameter(
            f"cannot write {out}: the folder {Path(out).parent} does not exist", param_hint="-o"
        )
    options = _options(no_embed, rules, fr_entries, follow_links=follow_links)
    with _FleetProgress(not quiet) as progress:
        try:
            report = fleet_lib.run_fleet(
                jobs_dir,
                db_path,
                options,
                workers=workers,
                dask=dask_address,
                ray=ray_address,
                progress=progress.update,
            )
        except fleet_lib.StoreError as exc:
            raise click.BadParameter(str(exc), param_hint="--db") from None
        except fleet_lib.FleetKnowledgeError as exc:  # a broken install or TRIAGE_RULES_DIR
            raise click.ClickException(str(exc)) from None
    text = render(report, fmt)
    if out:
        Path(out).write_text(text, encoding="utf-8")
        if not quiet:
            click.echo(f"fleet report written to {out}", err=True)
    else:
        click.echo(text, nl=False)


@main.command()
@click.option(
    "--pid",
    type=click.IntRange(min=1),
    help="The launcher's pid (torchrun, deepspeed, accelerate...) or one rank's: its rank "
    "processes are captured.",
)
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Every process on this node with RANK or LOCAL_RANK in its environment (the default).",
)
@click.option(
    "-o",
    "--output",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder to write the snapshot to (one host-<name>/ sub-folder per node).",
)
@click.option("--analyze", is_flag=True, help="Diagnose the snapshot once it is taken.")
@click.option("--native", is_flag=True, help="py-spy --native: C/C++ frames too.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=20.0,
    show_default=True,
    help="Seconds for each capture (a py-spy run, a flight-recorder dump, a tool).",
)
@_no_embed_option
def snapshot(
    pid: int | None,
    every: bool,
    out_dir: str,
    analyze: bool,
    native: bool,
    timeout: float,
    no_embed: bool,
) -> None:
    """Capture the evidence of a job hanging now: stacks, environment, flight recorder, node.

    Exit code 3 when no training process was found.
    """
    from triage import snapshot as snap

    if pid is not None and every:
        raise click.UsageError("give --pid or --all, not both")
    options = snap.SnapshotOptions(
        out_dir=out_dir,
        pid=pid,
        native=native,
        timeout=timeout,
        analyze=analyze,
        use_embeddings=not no_embed,
    )
    try:
        result = snap.take(options)
    except snap.SnapshotError as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo("\n".join(result.summary()), err=True)
    if result.diagnosis is not None:
        _emit(result.diagnosis, "text", None, quiet=True)
    if not result.found:
        sys.exit(snap.EXIT_NOTHING_FOUND)


@main.command()
@click.option(
    "--distributed",
    is_flag=True,
    help="Run under the job's launcher (`torchrun ... --no-python triage doctor "
    "--distributed`): rank 0 compares every rank's facts.",
)
@click.option("--format", "fmt", type=click.Choice(("text", "json")), default="text")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    help="Seconds to wait for the job's store and for every rank's facts.",
)
def doctor(distributed: bool, fmt: str, timeout: float) -> None:
    """Check versions, devices, memory, network and NCCL settings before the job starts.

    Exit code 3 when any finding is an error.
    """
    from triage import doctor as doc

    try:
        report = doc.run(doc.DoctorOptions(distributed=distributed, timeout=timeout))
    except doc.DoctorError as exc:
        raise click.UsageError(str(exc)) from exc
    if report.reporter:
        click.echo(doc.render(report, fmt))
    sys.exit(report.exit_code)


@main.group()
def bot() -> None:
    """Answer an issue with a diagnosis, from a CI job (GitHub Actions, GitLab CI)."""


def _bot_options(f: Any) -> Any:
    for option in reversed(
        (
            click.option(
                "--event",
                "event_path",
                required=True,
                type=click.Path(dir_okay=False),
                help="The event payload (GitHub: $GITHUB_EVENT_PATH; GitLab: $TRIGGER_PAYLOAD).",
            ),
            click.option(
                "--api-url",
                "api_url",
                metavar="URL",
                help="The tracker's API (default: $GITHUB_API_URL or https://api.github.com; "
                "$CI_API_V4_URL or https://gitlab.com/api/v4).",
            ),
            click.option("--dry-run", is_flag=True, help="Print the comment; post nothing."),
            _no_embed_option,
            _rules_option,
        )
    ):
        f = option(f)
    return f


@bot.command("github")
@_bot_options
def bot_github(
    event_path: str, api_url: str | None, dry_run: bool, no_embed: bool, rules: tuple[str, ...]
) -> None:
    """Diagnose the issue of a GitHub event and post (or update) one comment (GITHUB_TOKEN)."""
    _run_bot("github", event_path, api_url, dry_run, no_embed, rules)


@bot.command("gitlab")
@_bot_options
def bot_gitlab(
    event_path: str, api_url: str | None, dry_run: bool, no_embed: bool, rules: tuple[str, ...]
) -> None:
    """Diagnose the issue of a GitLab issue or note hook and post (or update) one note
    (GITLAB_TOKEN)."""
    _run_bot("gitlab", event_path, api_url, dry_run, no_embed, rules)


def _run_bot(
    tracker: str,
    event_path: str,
    api_url: str | None,
    dry_run: bool,
    no_embed: bool,
    rules: tuple[str, ...],
) -> None:
    import os

    from triage.bot.ci import run_ci
    from triage.bot.settings import ServiceSettings

    _check_rules(rules)
    settings = ServiceSettings(embeddings=not no_embed, rules_dirs=tuple(rules))
    result = run_ci(
        tracker,
        event_path,
        api_url=api_url,
        dry_run=dry_run,
        settings=settings,
        env=os.environ,
        echo=click.echo,
    )
    click.echo(result.message, err=True)
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option(
    "--api-url",
    "api_url",
    metavar="URL",
    help="GitHub's API (default https://api.github.com; GitHub Enterprise: https://HOST/api/v3). "
    "GitLab's is `gitlab: api_url:` in the config.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False),
    help="bot.yaml: allowed repositories, limits, defaults of the per-repository settings.",
)
def serve(host: str, port: int, api_url: str | None, config_path: str | None) -> None:
    """Answer GitHub and GitLab issue webhooks (secret: TRIAGE_WEBHOOK_SECRET; tokens:
    GITHUB_TOKEN, GITLAB_TOKEN)."""
    import dataclasses
    import logging
    import os

    from triage.bot.service import Service
    from triage.bot.settings import SettingsError, load_service_settings

    try:
        settings = load_service_settings(config_path)
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None
    if api_url:
        settings = dataclasses.replace(settings, github_api_url=api_url)
    _check_rules(settings.rules_dirs)
    try:
        service = Service.from_env(settings, os.environ)
    except ValueError as exc:  # no secret, an API URL that is not one
        raise click.UsageError(str(exc)) from None
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    try:
        service.serve_forever(host, port)
    except OSError as exc:
        raise click.UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _working_on(what: str, embeddings: bool) -> str:
    # the model-load hook adds "loading the similarity model" when (and only when) it loads
    return f"diagnosing {what}"


class _Spinner:
    """A transient spinner line on stderr while work of unknown length runs; terminals only.

    rich draws it from a thread of its own: never start one while parser workers may be
    forked (`pipeline.default_workers` reads from one process only when it has no threads).
    """

    active: _Spinner | None = None  # the one on screen, for the model-load notice

    def __init__(self, enabled: bool, message: str) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.message = message
        self.status: Any = None

    def __enter__(self) -> _Spinner:
        if self.enabled:
            from rich.console import Console

            self.status = Console(stderr=True).status(self.message, spinner="dots")
            self.status.start()
            _Spinner.active = self
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None
        if _Spinner.active is self:
            _Spinner.active = None


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


class _FleetProgress:
    """`triage fleet`'s progress on stderr: a bar on a terminal, else a line per tenth."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.bar: Any = None
        self.task: Any = None
        self.said = -1

    def __enter__(self) -> _FleetProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def update(self, event: str, done: int, total: int, name: str) -> None:
        """`run_fleet`'s callback: "hash" while digests are taken, "job" per finished job."""
        if not self.enabled or total <= 0:
            return
        what = "checking" if event == "hash" else "reading new jobs"
        if not self.tty:
            tenth = done * 10 // total
            if event == "job" and (tenth != self.said or done == total):
                self.said = tenth
                click.echo(f"fleet: {done}/{total} new jobs read", err=True)
            return
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            # No refresh thread: the pool forks its workers after this (see _BatchProgress).
            self.bar = Progress(
                TextColumn("{task.fields[what]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                console=Console(stderr=True),
                transient=True,
                auto_refresh=False,
            )
            self.bar.start()
            self.task = self.bar.add_task("", total=total, what=what)
        desc = Path(name).name
        self.bar.update(self.task, completed=done, total=total, description=desc, what=what)
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
    # numpy's OpenBLAS starts a thread per core when it is imported (~0.07 s of every run, in
    # the main process before the workers fork); what triage asks of numpy (line indexes,
    # small dot products) runs on one thread anyway. A setting of the user's own wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
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
    except click.exceptions.Abort as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):
            # click turns Ctrl-C into Abort: it is the user's stop, not an internal failure
            click.echo("interrupted (Ctrl-C)", err=True)
            sys.exit(EXIT_INTERRUPTED)
        click.echo("aborted", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("interrupted (Ctrl-C)", err=True)
        sys.exit(EXIT_INTERRUPTED)
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
