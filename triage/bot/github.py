"""GitHub: the events the bot answers, webhook signatures, and the REST calls it makes.

Events: `issues` (opened, edited) and `issue_comment` (created, on an issue, not a pull
request). Calls: list, create and update issue comments, add labels, read
`.github/triage.yml` from the default branch, and `GET /user` to learn the bot's own login
(a GitHub Actions token cannot: its comments are told apart by their author being a bot).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .core import Author, Ignored, IssueRef, Post, Request
from .rest import ApiError, RestClient, RetryPolicy, TokenUser

__all__ = ["API_URL", "CONFIG_PATH", "GitHub", "parse_event", "verify_signature"]

API_URL = "https://api.github.com"
CONFIG_PATH = ".github/triage.yml"
EVENTS = {"issues": ("opened", "edited"), "issue_comment": ("created",)}
_REPO = re.compile(r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")
_MAX_CONFIG = 64 * 1024


def verify_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """`X-Hub-Signature-256: sha256=<hex HMAC of the body>`, compared in constant time."""
    if not secret or not header:
        return False
    expected = b"sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
    return hmac.compare_digest(expected, header.strip().encode("utf-8", errors="replace"))


def parse_event(event: str | None, payload: Any) -> Request | Ignored:
    """A delivery's event name (`X-GitHub-Event`, `GITHUB_EVENT_NAME`) and payload, as a
    Request, or why the bot does not answer it. Never raises on a strange payload."""
    if not isinstance(payload, Mapping):
        return Ignored("the payload is not a JSON object")
    if event is None:
        event = "issue_comment" if "comment" in payload else "issues" if "issue" in payload else ""
    if event not in EVENTS:
        return Ignored(f"{event or 'this'} event is not an issue event")
    action = payload.get("action")
    if action not in EVENTS[event]:
        return Ignored(f"{event} {action!s} is not answered")
    issue = payload.get("issue")
    repository = payload.get("repository")
    if not isinstance(issue, Mapping) or not isinstance(repository, Mapping):
        return Ignored("the payload has no issue or repository")
    repo = repository.get("full_name")
    number = issue.get("number")
    if not isinstance(repo, str) or not _REPO.match(repo):
        return Ignored("the payload names no repository")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        return Ignored("the payload names no issue number")
    if issue.get("pull_request") is not None:
        return Ignored("comments on pull requests are not answered")
    comment = None
    reason = "opened" if action == "opened" else "edited"
    if event == "issue_comment":
        raw = payload.get("comment")
        if not isinstance(raw, Mapping):
            return Ignored("the payload has no comment")
        comment = Post(_int(raw.get("id")), _author(raw.get("user")), _str(raw.get("body")))
        reason = "command"
    sender = payload.get("sender")
    actor = _author(sender) if isinstance(sender, Mapping) else _author(issue.get("user"))
    raw_labels = issue.get("labels")
    labels = tuple(
        str(label.get("name"))
        for label in (raw_labels if isinstance(raw_labels, list) else ())
        if isinstance(label, Mapping) and label.get("name")
    )
    return Request(
        ref=IssueRef("github", repo, number, default_branch=_str(repository.get("default_branch"))),
        reason=reason,
        title=_str(issue.get("title")),
        body=_str(issue.get("body")),
        author=_author(issue.get("user")),
        actor=actor,
        labels=labels,
        comment=comment,
    )


class GitHub:
    """The REST calls of the bot against api.github.com or a GitHub Enterprise
    `https://HOST/api/v3`."""

    name = "github"
    config_name = CONFIG_PATH

    def __init__(self, client: RestClient) -> None:
        self._client = client
        self._user = TokenUser(client, "login")

    @classmethod
    def connect(
        cls, api_url: str, token: str | None, *, retry: RetryPolicy = RetryPolicy()
    ) -> GitHub:
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return cls(RestClient(api_url, headers, retry=retry))

    def identity(self) -> str | None:
        return self._user.name()

    def comments(self, ref: IssueRef) -> list[Post]:
        items, _ = self._client.pages(
            f"/repos/{ref.repo}/issues/{ref.number}/comments", {"per_page": 100}
        )
        out = []
        for item in items:
            if isinstance(item, Mapping):
                author = _author(item.get("user"))
                out.append(Post(_int(item.get("id")), author, _str(item.get("body"))))
        return out

    def create_comment(self, ref: IssueRef, body: str) -> int | None:
        resp = self._client.request(
            "POST", f"/repos/{ref.repo}/issues/{ref.number}/comments", body={"body": body}
        )
        return _int(resp.data.get("id")) if isinstance(resp.data, Mapping) else None

    def update_comment(self, ref: IssueRef, comment_id: int, body: str) -> None:
        self._client.request(
            "PATCH", f"/repos/{ref.repo}/issues/comments/{int(comment_id)}", body={"body": body}
        )

    def add_labels(self, ref: IssueRef, labels: Sequence[str]) -> None:
        self._client.request(
            "POST", f"/repos/{ref.repo}/issues/{ref.number}/labels", body={"labels": list(labels)}
        )

    def repo_config(self, ref: IssueRef) -> str | None:
        try:
            resp = self._client.request(
                "GET",
                f"/repos/{ref.repo}/contents/{CONFIG_PATH}",
                headers={"Accept": "application/vnd.github.raw+json"},
                raw=True,
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        text = resp.data if isinstance(resp.data, str) else ""
        if resp.headers.get("content-type", "").startswith("application/json"):
            # the JSON form (a server that ignored the raw media type): base64 content
            try:
                doc = json.loads(text)
                text = base64.b64decode(doc["content"]).decode("utf-8", errors="replace")
            except (ValueError, KeyError, TypeError):
                return None
        return text[:_MAX_CONFIG]


def _author(user: Any) -> Author:
    if not isinstance(user, Mapping):
        return Author("")
    login = _str(user.get("login"))
    return Author(login, is_bot=user.get("type") == "Bot" or login.endswith("[bot]"))


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
