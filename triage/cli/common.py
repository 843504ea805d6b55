"""What the commands share: options, the report format, writing the report, exit codes."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

FORMATS = ("text", "json", "md", "html")
SUFFIX_FORMATS = {
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
rules_option = click.option(
    "--rules",
    "rules",
    multiple=True,
    # checked by check_rules (check_input_folder): a clear sentence for a pipe, a file, a name
    # too long or a folder the user may not read
    type=click.Path(),
    help="Add a folder of your own rules (repeatable).",
)
no_embed_option = click.option(
    "--no-embed",
    is_flag=True,
    help="Never load the embedding model: rules, cross-rank analysis and TF-IDF neighbours only.",
)
fr_entries_option = click.option(
    "--fr-entries",
    "fr_entries",
    type=click.IntRange(min=0),
    default=None,
    help="Flight-recorder entries to read per dump: 0 reads all (default: all, or the last "
    "128 of each when a big job's dumps add up to over 16 MiB).",
)
# where the many jobs of `batch` and `fleet` run
jobs_option = click.option(
    "-j",
    "--jobs",
    "workers",
    type=click.IntRange(min=1),
    default=None,
    help="Parallel processes (default: all cores).",
)
dask_option = click.option(
    "--dask",
    "dask_address",
    metavar="ADDRESS",
    help="Run the jobs on this Dask scheduler (tcp://host:8786; needs triage[dask]); every "
    "worker must see JOBS_DIR at the same path.",
)
ray_option = click.option(
    "--ray",
    "ray_address",
    metavar="ADDRESS",
    help="Run the jobs on this Ray cluster (ray://host:10001 or auto; needs triage[ray]).",
)
follow_links_option = click.option(
    "--follow-links",
    "follow_links",
    is_flag=True,
    help="Also read what symbolic links point to outside the paths given (default: such "
    "links are listed, not followed).",
)
redact_hosts_option = click.option(
    "--redact-hosts",
    "redact_hosts",
    is_flag=True,
    help="Also replace e-mail addresses, IP addresses, host names and home-folder user names "
    "with stand-ins (<host-1>, <ip-1>...). Secrets are always masked.",
)


def many_jobs_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """What `batch` and `fleet` both take: where the jobs run and how each is read."""
    for option in reversed(
        (
            jobs_option,
            dask_option,
            ray_option,
            no_embed_option,
            rules_option,
            fr_entries_option,
            follow_links_option,
        )
    ):
        command = option(command)
    return command


output_option = click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(dir_okay=False),
    help="Write the report to FILE; its suffix picks the format (.html, .json, .md, .txt).",
)
format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    help="Report format (default: from -o's suffix, else text).",
)
brief_option = click.option(
    "--brief",
    is_flag=True,
    help="Only the verdict, the culprit, the top fix and one line of evidence (text, md).",
)


def pipeline_options(
    no_embed: bool,
    rules: tuple[str, ...],
    fr_entries: int | None = None,
    *,
    follow_links: bool = False,
    redact_hosts: bool = False,
) -> Any:
    from triage.pipeline import Options

    check_rules(rules)
    return Options(
        use_embeddings=not no_embed,
        extra_rules_dirs=tuple(rules),
        fr_entries=fr_entries,
        follow_links=follow_links,
        redact_hosts=redact_hosts,
    )


def check_rules(extra: tuple[str, ...]) -> None:
    """A broken rule file is the user's to fix: say which file and rule, exit 2."""
    if not extra:
        return
    for folder in extra:
        check_input_folder(folder, "--rules")
    from triage.classify import rules as engine

    try:
        engine.load(extra)
    except engine.RuleError as exc:
        raise click.UsageError(str(exc)) from exc


def pick_format(fmt: str | None, out: str | None, brief: bool = False) -> str:
    """The report format, checked before any work is done: a typo costs no minutes."""
    if out:
        check_output_file(out)
    if not fmt and out:
        fmt = SUFFIX_FORMATS.get(Path(out).suffix.lower())
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


def emit(diagnosis: Any, fmt: str, out: str | None, quiet: bool, brief: bool = False) -> None:
    from triage import report

    if out:
        try:
            Path(out).write_text(report.render(diagnosis, fmt, brief), encoding="utf-8")
        except OSError as exc:
            raise click.BadParameter(
                f"cannot write {shown_path(out)}: {exc.strerror or exc}", param_hint="-o"
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


def path_exists(arg: str) -> bool:
    """Is the argument a file or folder here? A pasted error's text given as a path is none:
    the OS refuses a name that long or with a NUL in it, which is an answer too."""
    try:
        return Path(arg).exists()
    except (OSError, ValueError):
        return False


def refuse_streams(paths: tuple[str, ...]) -> None:
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


# A path is quoted in a message up to this many characters: a pasted text given as a path
# would fill the terminal.
_SHOWN_PATH = 200


def shown_path(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    return text if len(text) <= _SHOWN_PATH else text[:_SHOWN_PATH] + "…"


def check_output_file(out: str, param_hint: str = "-o") -> None:
    """Refuse, before any work is done, a path no report can be written to: a folder, a file
    under something that is no folder, a name the OS refuses (too long). Each OSError the
    checks meet (ENAMETOOLONG, EACCES) is the user's to fix: a usage error, not a crash. A
    pipe stays allowed (`-o /dev/stdout`, `-o >(gzip > r.gz)`): something reads it."""
    path = Path(out)
    shown = shown_path(out)
    try:
        if path.is_dir():
            raise click.BadParameter(
                f"{shown} is a folder; give a file name", param_hint=param_hint
            )
        folder = path.parent
        if not folder.exists():
            raise click.BadParameter(
                f"cannot write {shown}: the folder {shown_path(folder)} does not exist",
                param_hint=param_hint,
            )
        if not folder.is_dir():
            raise click.BadParameter(
                f"cannot write {shown}: {shown_path(folder)} is a file, not a folder",
                param_hint=param_hint,
            )
    except OSError as exc:
        raise click.BadParameter(
            f"cannot write {shown}: {exc.strerror or exc}", param_hint=param_hint
        ) from None


def check_output_folder(out_dir: str, param_hint: str = "-o") -> None:
    """The folder a command writes into is one where it exists, and a name the OS takes
    where it does not yet (the command makes it only once it has something to write)."""
    import stat

    shown = shown_path(out_dir)
    try:
        if not stat.S_ISDIR(os.stat(out_dir).st_mode):
            raise click.BadParameter(f"{shown} is a file; give a folder", param_hint=param_hint)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise click.BadParameter(
            f"cannot write to the folder {shown}: {exc.strerror or exc}", param_hint=param_hint
        ) from None


@contextlib.contextmanager
def _refusals_said(shown: str, missing: str, unreadable: str, param_hint: str) -> Iterator[None]:
    """The OS's refusals of a path the command reads, as a usage error that says which."""
    try:
        yield
    except FileNotFoundError:
        raise click.BadParameter(f"{missing}: {shown}", param_hint=param_hint) from None
    except OSError as exc:
        raise click.BadParameter(
            f"cannot read {unreadable}{shown}: {exc.strerror or exc}", param_hint=param_hint
        ) from None


def check_input_folder(folder: str, param_hint: str) -> None:
    """A folder the command reads (`--rules DIR`, the jobs of `batch` and `fleet`) is one, and
    can be listed: a file, a pipe, a name too long or a folder the user may not read each get
    a sentence that says so, not an internal error later."""
    import stat

    shown = shown_path(folder)
    with _refusals_said(shown, "no such folder", "the folder ", param_hint):
        mode = os.stat(folder).st_mode
        if not stat.S_ISDIR(mode):
            kind = "a pipe" if stat.S_ISFIFO(mode) else "a file"
            raise click.BadParameter(f"{shown} is {kind}, not a folder", param_hint=param_hint)
        with os.scandir(folder):
            pass


def check_input_file(path: str, param_hint: str, what: str = "file") -> None:
    """A file the command reads whole (`bot --event`, `serve --config`) is a regular file it
    may read: a pipe would be read once or block, a folder or a name too long is no file."""
    import stat

    shown = shown_path(path)
    with _refusals_said(shown, f"no such {what}", "", param_hint):
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            kind = (
                "a folder"
                if stat.S_ISDIR(mode)
                else "a pipe"
                if stat.S_ISFIFO(mode)
                else "not a regular file"
            )
            raise click.BadParameter(
                f"{shown} is {kind}; give the file itself (save a pipe's content first)",
                param_hint=param_hint,
            )
        with open(path, "rb"):
            pass
