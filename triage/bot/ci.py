"""`triage bot github|gitlab --event PATH`: answer the one event a CI job was started for.

GitHub Actions gives the event's payload in `GITHUB_EVENT_PATH`, its name in
`GITHUB_EVENT_NAME`, a token in `GITHUB_TOKEN` (the workflow passes it) and the API URL of
its server in `GITHUB_API_URL` (GitHub Enterprise included). GitLab CI has no event of its
own: a pipeline trigger webhook hands the hook's body to the job as the file
`$TRIGGER_PAYLOAD`; the API URL is `CI_API_V4_URL`, the token a project access token in
`GITLAB_TOKEN`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from . import github, gitlab
from .core import Ignored, Outcome, Tracker, respond
from .rest import ApiError, RetryPolicy
from .settings import ServiceSettings

__all__ = ["CiResult", "run_ci"]

MAX_EVENT_BYTES = 25 * 2**20  # GitHub caps webhook payloads at 25 MB

log = logging.getLogger("triage.bot")


@dataclass(frozen=True)
class CiResult:
    exit_code: int  # 0 answered, ignored or skipped; 1 the API failed; 2 bad input
    message: str
    outcome: Outcome | None = None


def run_ci(
    tracker_name: str,
    event_path: str,
    *,
    api_url: str | None,
    dry_run: bool,
    settings: ServiceSettings,
    env: Mapping[str, str],
    echo: Callable[[str], None],
    retry: RetryPolicy = RetryPolicy(),
) -> CiResult:
    """Read the event file, answer it, and say what was done. Never raises."""
    payload, problem = _read_event(event_path)
    if problem:
        return CiResult(2, problem)
    tracker: Tracker
    if tracker_name == "github":
        req = github.parse_event(env.get("GITHUB_EVENT_NAME") or None, payload)
        url = api_url or env.get("GITHUB_API_URL") or github.API_URL
        token_name = "GITHUB_TOKEN"
    else:
        req = gitlab.parse_event(payload)
        url = api_url or env.get("CI_API_V4_URL") or gitlab.API_URL
        token_name = "GITLAB_TOKEN"
    if isinstance(req, Ignored):
        return CiResult(0, f"ignored: {req.reason}")
    token = env.get(token_name) or None
    if token is None and not dry_run:
        return CiResult(2, f"{token_name} is not set: the bot needs a token to comment")
    if dry_run:
        # A dry run posts nothing and survives a failed read: retrying an API that does not
        # answer only made it wait (31-35 s with the default backoff). One try, and the
        # result says what could not be read.
        retry = dataclasses.replace(retry, attempts=1)
    try:
        if tracker_name == "github":
            tracker = github.GitHub.connect(url, token, retry=retry)
        else:
            tracker = gitlab.GitLab.connect(url, token, retry=retry)
    except ValueError as exc:
        return CiResult(2, f"--api-url: {exc}")
    try:
        outcome = respond(req, tracker, settings, dry_run=dry_run)
    except ApiError as exc:
        return CiResult(1, f"{tracker_name} API: {exc}")
    where = f"{req.ref.repo}#{req.ref.number}"
    if outcome.action == "dry-run" and outcome.body is not None:
        echo(outcome.body)
        labels = f"; would add labels {', '.join(outcome.labels)}" if outcome.labels else ""
        unread = ""
        if outcome.unread:
            unread = (
                f"; not read from the {tracker_name} API ({len(outcome.unread)} call(s), "
                f"went on without them): {outcome.unread[0]}"
            )
        return CiResult(0, f"dry run for {where}: {outcome.reason}{labels}{unread}", outcome)
    labels = f"; labels added: {', '.join(outcome.labels)}" if outcome.labels else ""
    return CiResult(0, f"{where}: {outcome.action}: {outcome.reason}{labels}", outcome)


def _read_event(path: str) -> tuple[object, str | None]:
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_EVENT_BYTES:
            return None, f"{path}: {size:,} bytes is more than an event payload can be"
        text = file.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None, f"{path}: no such event file"
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{path}: cannot read the event file: {exc}"
    try:
        return json.loads(text), None
    except (ValueError, RecursionError) as exc:
        return None, f"{path}: the event file is not JSON ({exc})"
