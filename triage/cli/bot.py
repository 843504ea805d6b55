"""`triage bot github|gitlab` and `triage serve`: answer issues on a tracker."""

from __future__ import annotations

import sys
from typing import Any

import click

from triage.cli.common import check_input_file, check_rules, no_embed_option, rules_option


@click.group("bot")
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
            no_embed_option,
            rules_option,
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

    check_input_file(event_path, "--event", "event file")
    check_rules(rules)
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


@click.command("serve")
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

    if config_path is not None:
        check_input_file(config_path, "--config")
    try:
        settings = load_service_settings(config_path)
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None
    if api_url:
        settings = dataclasses.replace(settings, github_api_url=api_url)
    check_rules(settings.rules_dirs)
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
