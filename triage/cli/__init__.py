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

One module per group of commands (analyze, rules, index, jobs, machine, bot); `common` holds
what they share and `progress` what they draw on a terminal.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from triage.cli.analyze import analyze, explain
from triage.cli.bot import bot, serve
from triage.cli.common import EXIT_CODES, EXIT_INTERRUPTED, EXIT_NO_EVIDENCE, FORMATS
from triage.cli.index import index
from triage.cli.jobs import batch, fleet
from triage.cli.machine import doctor, snapshot
from triage.cli.rules import rules

__all__ = ["EXIT_INTERRUPTED", "EXIT_NO_EVIDENCE", "FORMATS", "main", "run"]

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


for _command in (analyze, explain, rules, index, batch, fleet, snapshot, doctor, bot, serve):
    main.add_command(_command)


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
