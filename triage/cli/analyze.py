"""`triage PATH...` and `triage explain`: diagnose a bundle, a pasted error, or JSON lines."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import Any

import click

from triage.cli.common import (
    brief_option,
    emit,
    follow_links_option,
    format_option,
    fr_entries_option,
    no_embed_option,
    output_option,
    path_exists,
    pick_format,
    pipeline_options,
    redact_hosts_option,
    refuse_streams,
    rules_option,
)
from triage.cli.progress import ReadProgress, Spinner, announce_model_load, working_on


@click.command("analyze", hidden=True)
@click.argument("paths", nargs=-1, required=True, type=click.Path(), metavar="PATH...")
@output_option
@format_option
@brief_option
@no_embed_option
@rules_option
@fr_entries_option
@follow_links_option
@redact_hosts_option
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

    missing = [p for p in paths if not path_exists(p)]
    if missing:
        shown = ", ".join(m if len(m) <= 200 else m[:200] + "…" for m in missing)
        raise click.BadParameter(
            f"no such file or folder: {shown} (to diagnose a pasted error, use `triage explain`)",
            param_hint="PATH",
        )
    refuse_streams(paths)
    fmt = pick_format(fmt, out, brief)
    options = pipeline_options(
        no_embed, rules, fr_entries, follow_links=follow_links, redact_hosts=redact_hosts
    )
    announce_model_load(quiet, options.use_embeddings)
    with ReadProgress(enabled=not quiet, model=options.use_embeddings) as progress:
        diagnosis = pipeline.diagnose(paths, options, progress.update)
    # This process ends right after: the GC need not walk what was read once more at exit
    # (~0.1 s on a 1,024-rank bundle).
    gc.freeze()
    emit(diagnosis, fmt, out, quiet, brief)


@click.command("explain")
@click.argument("text", nargs=-1)
@click.option(
    "--jsonl",
    is_flag=True,
    help='Batch: stdin lines {"id":..,"text":..} -> stdout lines {"id":..,"diagnosis":{..}}.',
)
@output_option
@format_option
@brief_option
@no_embed_option
@rules_option
@redact_hosts_option
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
    """Diagnose a pasted error: TEXT, stdin when no TEXT or `-` is given, a file's content
    when the one TEXT names a file."""
    from triage import pipeline

    options = pipeline_options(no_embed, rules, redact_hosts=redact_hosts)
    announce_model_load(quiet, options.use_embeddings)
    if jsonl:
        _explain_jsonl(options)
        return
    fmt = pick_format(fmt, out, brief)
    body = _pasted(text, quiet)
    if not body.strip():
        raise click.UsageError("nothing to explain: give the error text as arguments or on stdin")
    with Spinner(not quiet, working_on("the error", options.use_embeddings)):
        diagnosis = pipeline.explain(body, options)
    emit(diagnosis, fmt, out, quiet, brief)


def _pasted(text: tuple[str, ...], quiet: bool) -> str:
    """The error to explain: the words given, stdin for none or `-`, and a file's content
    when the one word given names an existing file (a path pasted as text explains nothing)."""
    if not text or text == ("-",):
        return sys.stdin.read()
    if len(text) == 1 and "\n" not in text[0]:
        path = Path(text[0])
        try:
            named_file = path.exists() and not path.is_dir()
        except OSError:  # a pasted line too long to be a file name
            named_file = False
        if named_file:
            if not quiet:
                click.echo(f"reading the error from {path} (a file of that name)", err=True)
            try:
                return path.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise click.BadParameter(
                    f"cannot read {path}: {exc.strerror or exc}", param_hint="TEXT"
                ) from exc
    return " ".join(text)


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
