"""`triage batch` and `triage fleet`: many jobs at once, here or on a cluster."""

from __future__ import annotations

from pathlib import Path

import click

from triage.cli.common import (
    SUFFIX_FORMATS,
    check_input_folder,
    check_output_file,
    many_jobs_options,
    pipeline_options,
    redact_hosts_option,
    shown_path,
)
from triage.cli.progress import BatchProgress, FleetProgress


@click.command("batch")
@click.argument("jobs_dir", type=click.Path())  # check_input_folder says what is wrong
@click.option(
    "-o",
    "--output",
    "out",
    required=True,
    type=click.Path(dir_okay=False),
    help="JSON lines, one per job.",
)
@many_jobs_options
@redact_hosts_option
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
    check_input_folder(jobs_dir, "JOBS_DIR")
    check_output_file(out)
    try:
        batch_runner.check_cluster(dask=dask_address, ray=ray_address)
    except batch_runner.ClusterUnavailable as exc:
        raise click.UsageError(str(exc)) from None
    # Absolute paths: a cluster's workers read the jobs where they are (a shared filesystem).
    entries = batch_runner.job_entries(os.path.abspath(jobs_dir), follow_links=follow_links)
    options = pipeline_options(
        no_embed, rules, fr_entries, follow_links=follow_links, redact_hosts=redact_hosts
    )
    try:
        rows = open(out, "w", encoding="utf-8")  # noqa: SIM115 - closed by the `with` below
    except OSError as exc:
        raise click.BadParameter(
            f"cannot write {shown_path(out)}: {exc.strerror or exc}", param_hint="-o"
        ) from None
    with rows as fh, BatchProgress(len(entries)) as progress:
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


@click.command("fleet")
@click.argument("jobs_dir", type=click.Path())  # check_input_folder says what is wrong
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
@many_jobs_options
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
    fmt = fmt or (SUFFIX_FORMATS.get(Path(out).suffix.lower()) if out else "md")
    if fmt not in ("html", "md", "json"):
        raise click.BadParameter(
            f"cannot tell the format of {out}: use .html, .md or .json, or --format",
            param_hint="-o",
        )
    check_input_folder(jobs_dir, "JOBS_DIR")
    if out:
        check_output_file(out)
    check_output_file(db_path, "--db")
    options = pipeline_options(no_embed, rules, fr_entries, follow_links=follow_links)
    with FleetProgress(not quiet) as progress:
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
        try:
            Path(out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise click.BadParameter(
                f"cannot write {shown_path(out)}: {exc.strerror or exc}", param_hint="-o"
            ) from None
        if not quiet:
            click.echo(f"fleet report written to {out}", err=True)
    else:
        click.echo(text, nl=False)
