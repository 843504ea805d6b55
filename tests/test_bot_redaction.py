"""A secret in an issue never reaches a posted comment: tokens, keys, URL passwords, and (the
bot always runs triage's hosts mode) e-mails, IPs, host names and home-folder users.

The secrets and the log that carries them are test_redact.py's, so the bot is held to the
same list as every report format."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
from pathlib import Path
from typing import Any

import pytest
from bot_samples import FAST_RETRY, SETTINGS
from test_redact import HOSTS, LOG, SECRETS, _leaks
from tracker_api import TrackerAPI, github_comment_event, github_issue_event, gitlab_issue_event

from triage.bot.ci import run_ci
from triage.bot.service import Service
from triage.bot.settings import FetchLimits, ServiceSettings

# What is quoted, not how sure the diagnosis is, is under test here: the repositories post
# whatever the score (the log's own story, a generic RuntimeError, scores low)
POST_ALWAYS = "min_confidence: 0\n"

PROSE = (
    f"Hi, I run this as {HOSTS['email']} on {HOSTS['host']} ({HOSTS['ip']}), my key is "
    f"{SECRETS['openai']} and the db is postgres://me:{SECRETS['url-password']}@db/x."
)
BODY = f"{PROSE}\n\n```\n{LOG}```\n"
ALL = {**SECRETS, **HOSTS}


@pytest.fixture
def api() -> Any:
    api = TrackerAPI().start()
    api.add_user("pat", "triage-bot", "User")
    yield api
    api.stop()


def _posted(api: TrackerAPI) -> str:
    """Everything the bot sent the tracker: comment bodies and labels."""
    return "\n".join(json.dumps(r.body) for r in api.writes())


def _quoted_the_log(text: str) -> bool:
    return "HF_TOKEN=<redacted>" in text or "HF\\\\_TOKEN=&lt;redacted&gt;" in text


def test_secrets_in_an_issue_and_a_comment_never_reach_a_webhook_comment(
    api: TrackerAPI,
) -> None:
    settings = ServiceSettings(
        embeddings=False, github_api_url=api.github_url, gitlab_api_url=api.gitlab_url
    )
    service = Service(
        settings, github_secret="s", gitlab_secret=None, github_token="pat", gitlab_token=None,
        retry=FAST_RETRY,
    )  # fmt: skip
    address = service.start("127.0.0.1", 0)
    api.files[("octo/train", ".github/triage.yml")] = POST_ALWAYS
    try:
        api.add_github_issue("octo/train", 1)
        api.add_github_issue("octo/train", 1, comments=(("carol", f"also {PROSE}\n\n/triage"),))
        comment_id = api.comments("octo/train", 1)[0]["id"]
        title = f"Crash with token {SECRETS['github']}"
        for event, payload in (
            ("issues", github_issue_event("octo/train", 1, BODY, title=title)),
            ("issue_comment", github_comment_event("octo/train", 1, BODY, comment_id, "/triage")),
        ):
            body = json.dumps(payload).encode()
            signature = "sha256=" + hmac.new(b"s", body, hashlib.sha256).hexdigest()
            conn = http.client.HTTPConnection(*address, timeout=30)
            conn.request(
                "POST", "/", body=body,
                headers={"X-GitHub-Event": event, "X-Hub-Signature-256": signature},
            )  # fmt: skip
            assert conn.getresponse().status == 202
            conn.close()
        assert service.drain()
    finally:
        service.close()
    posted = _posted(api)
    assert api.comments("octo/train", 1)[-1]["body"].startswith("<!-- triage-bot")
    assert _quoted_the_log(posted)  # the lines were quoted, masked
    assert _leaks(posted, ALL) == []


def test_secrets_never_reach_a_gitlab_note_or_a_dry_run(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_user("glpat", "project_1_bot", "Bot")
    api.files[("1", ".gitlab/triage.yml")] = POST_ALWAYS
    api.add_gitlab_issue(1, 2)
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(gitlab_issue_event(1, "ml/train", 2, BODY)))
    printed: list[str] = []
    for dry_run in (True, False):
        result = run_ci(
            "gitlab", str(path), api_url=None, dry_run=dry_run, settings=SETTINGS,
            env={"GITLAB_TOKEN": "glpat", "CI_API_V4_URL": api.gitlab_url},
            echo=printed.append, retry=FAST_RETRY,
        )  # fmt: skip
        assert result.exit_code == 0, result.message
    assert _quoted_the_log(printed[0]) and _leaks(printed[0], ALL) == []
    posted = _posted(api)
    assert _quoted_the_log(posted) and _leaks(posted, ALL) == []


def test_secrets_in_an_attached_log_never_reach_the_comment(
    api: TrackerAPI, tmp_path: Path
) -> None:
    api.add_user("tok", "github-actions[bot]", "Bot", can_ask_who=False)
    url = api.serve_file("rank3.log", LOG.encode())
    api.files[("octo/train", ".github/triage.yml")] = "fetch_links: true\n" + POST_ALWAYS
    api.add_github_issue("octo/train", 3)
    path = tmp_path / "event.json"
    path.write_text(json.dumps(github_issue_event("octo/train", 3, f"see [log]({url})")))
    settings = ServiceSettings(
        embeddings=False,
        fetch=FetchLimits(hosts=(url.split("/")[2],), allow_http=True),
    )
    env = {"GITHUB_TOKEN": "tok", "GITHUB_EVENT_NAME": "issues", "GITHUB_API_URL": api.github_url}
    result = run_ci(
        "github", str(path), api_url=None, dry_run=False, settings=settings, env=env,
        echo=lambda _: None, retry=FAST_RETRY,
    )  # fmt: skip
    assert result.exit_code == 0, result.message
    posted = _posted(api)
    assert "attachment/rank3.log" in posted
    assert _quoted_the_log(posted) and _leaks(posted, ALL) == []
