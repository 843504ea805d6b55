"""`triage rules list | check`: see the rules and test them on a file or a text."""

from __future__ import annotations

import os
import re

import click

from triage.cli.common import check_rules, path_exists, refuse_streams, rules_option


@click.group("rules")
def rules() -> None:
    """See and test the rules."""


@rules.command("list")
@rules_option
def rules_list(rules: tuple[str, ...]) -> None:
    """List every rule: id, title, what it concludes."""
    from triage.classify import rules as engine

    check_rules(rules)
    for rule in engine.list_rules(rules):
        click.echo(engine.describe(rule))


@rules.command("check")
@click.argument("file_or_text")
@rules_option
def rules_check(file_or_text: str, rules: tuple[str, ...]) -> None:
    """Show which rules match FILE_OR_TEXT, and the lines they quote."""
    from triage import pipeline
    from triage.redact import redact_text

    check_rules(rules)
    if not file_or_text.strip():
        # Path("") is the current folder: an empty argument must not scan it
        raise click.BadParameter(
            "nothing to check: give a file, a folder or the text of an error",
            param_hint="FILE_OR_TEXT",
        )
    exists = path_exists(file_or_text)
    if _looks_like_a_path(file_or_text) and not exists:
        raise click.BadParameter(
            f"no such file or folder: {file_or_text} (quote an error's text to check it as text)",
            param_hint="FILE_OR_TEXT",
        )
    refuse_streams((file_or_text,) if exists else ())
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
