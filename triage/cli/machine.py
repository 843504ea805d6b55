"""`triage snapshot` and `triage doctor`: look at the job on this machine, while it hangs or
before it starts."""

from __future__ import annotations

import sys

import click

from triage.cli.common import check_output_folder, emit, no_embed_option


@click.command("snapshot")
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
@no_embed_option
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
    check_output_folder(out_dir)
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
        emit(result.diagnosis, "text", None, quiet=True)
    if not result.found:
        sys.exit(snap.EXIT_NOTHING_FOUND)


@click.command("doctor")
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
