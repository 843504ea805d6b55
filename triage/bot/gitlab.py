"""GitLab: issue and note hooks, the webhook token, and the notes API.

Hooks: `Issue Hook` (open; update when the title or description changed: GitLab also sends
update for a label change, the bot's own included) and `Note Hook` on an issue (a new comment;
`/triage` re-runs). Calls: list, create and update notes, add labels (`add_labels` on the
issue), read `.gitlab/triage.yml` (else `.github/triage.yml`) from the default branch, and
`GET /user` for the bot's own username (a project access token is a user there).

In CI (`triage bot gitlab --event "$TRIGGER_PAYLOAD"`), the payload is the same hook body
that a pipeline trigger webhook hands the job.
"""

from __future__ import annotations

import hmac
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from .core import Author, Ignored, IssueRef, Post, Request
from .rest import ApiError, RestClient, RetryPolicy, TokenUser

__all__ = ["API_URL", "CONFIG_PATHS", "GitLab", "parse_event", "verify_token"]

API_URL = "https://gitlab.com/api/v4"
CONFIG_PATHS = (".gitlab/triage.yml", ".github/triage.yml")
HOOKS = ("Issue Hook", "Note Hook", "Confidential Issue Hook", "Confidential Note Hook")
# Bot accounts GitLab makes (project/group access tokens, its own service bots); the API
# gives no bot flag in hooks.
_BOT_NAME = re.compile(
    r"(?i)^(?:project|group)_\d+_bot(?:_[0-9a-f]+)?$|\[bot\]$|[-_]bot$"
    r"|^(?:alert|support|visual-review|ghost|gitlab-bot)$"
)
_MAX_CONFIG = 64 * 1024


def verify_token(secret: str, header: str | None) -> bool:
    """`X-Gitlab-Token` equals the shared secret, compared in constant time."""
    if not secret or header is None:
        return False
    return hmac.compare_digest(
        secret.encode("utf-8"), header.strip().encode("utf-8", errors="replace")
    )


def parse_event(payload: Any) -> Request | Ignored:
    """An issue or note hook body as a Request, or why the bot does not answer it."""
    if not isinstance(payload, Mapping):
        return Ignored("the payload is not a JSON object")
    kind = payload.get("object_kind")
    project = payload.get("project")
    attrs = payload.get("object_attributes")
    if kind not in ("issue", "note"):
        return Ignored(f"{kind or 'this'} event is not an issue event")
    if not isinstance(project, Mapping) or not isinstance(attrs, Mapping):
        return Ignored("the payload has no project or object_attributes")
    project_id = _int(project.get("id"))
    path = project.get("path_with_namespace")
    if project_id is None or not isinstance(path, str) or not path:
        return Ignored("the payload names no project")
    actor = _author(payload.get("user"))
    comment = None
    if kind == "issue":
        issue: Any = attrs
        action = attrs.get("action")
        changes = payload.get("changes")
        changed = isinstance(changes, Mapping) and ("description" in changes or "title" in changes)
        if action == "open":
            reason = "opened"
        elif action == "update" and changed:
            reason = "edited"
        else:
            return Ignored(f"issue {action!s} is not answered")
    else:
        if attrs.get("noteable_type") != "Issue":
            return Ignored("notes on merge requests, commits and snippets are not answered")
        if attrs.get("action") not in (None, "create"):
            return Ignored(f"note {attrs.get('action')!s} is not answered")
        issue = payload.get("issue")
        if not isinstance(issue, Mapping):
            return Ignored("the note hook has no issue")
        system = attrs.get("system") is True
        comment = Post(_int(attrs.get("id")), actor, _str(attrs.get("note")), system=system)
        reason = "command"
    iid = _int(issue.get("iid"))
    if iid is None or iid < 1:
        return Ignored("the payload names no issue")
    raw_labels = payload.get("labels") or issue.get("labels")
    labels = tuple(
        str(label.get("title"))
        for label in (raw_labels if isinstance(raw_labels, list) else ())
        if isinstance(label, Mapping) and label.get("title")
    )
    author_id = issue.get("author_id")
    author = actor if reason == "opened" else Author(f"user {author_id}")
    return Request(
        ref=IssueRef(
            "gitlab",
            path,
            iid,
            project_id=project_id,
            default_branch=_str(project.get("default_branch")) or None,
            web_url=_str(project.get("web_url")) or None,
        ),
        reason=reason,
        title=_str(issue.get("title")),
        body=_str(issue.get("description")),
        author=author,
        actor=actor,
        labels=labels,
        comment=comment,
    )


class GitLab:
    """The notes API of gitlab.com or a self-managed `https://HOST/api/v4`."""

    name = "gitlab"
    config_name = CONFIG_PATHS[0]

    def __init__(self, client: RestClient) -> None:
        self._client = client
        self._user = TokenUser(client, "username")

    @classmethod
    def connect(
        cls, api_url: str, token: str | None, *, retry: RetryPolicy = RetryPolicy()
    ) -> GitLab:
        headers = {"PRIVATE-TOKEN": token} if token else {}
        return cls(RestClient(api_url, headers, retry=retry))

    def identity(self) -> str | None:
        return self._user.name()

    def comments(self, ref: IssueRef) -> list[Post]:
        items, _ = self._client.pages(
            self._issue(ref) + "/notes",
            {"per_page": 100, "sort": "asc", "order_by": "created_at"},
        )
        out = []
        for item in items:
            if not isinstance(item, Mapping):
                continue
            out.append(
                Post(
                    _int(item.get("id")),
                    _author(item.get("author")),
                    _str(item.get("body")),
                    system=item.get("system") is True,
                )
            )
        return out

    def create_comment(self, ref: IssueRef, body: str) -> int | None:
        resp = self._client.request("POST", self._issue(ref) + "/notes", body={"body": body})
        return _int(resp.data.get("id")) if isinstance(resp.data, Mapping) else None

    def update_comment(self, ref: IssueRef, comment_id: int, body: str) -> None:
        self._client.request(
            "PUT", f"{self._issue(ref)}/notes/{int(comment_id)}", body={"body": body}
        )

    def add_labels(self, ref: IssueRef, labels: Sequence[str]) -> None:
        self._client.request("PUT", self._issue(ref), body={"add_labels": ",".join(labels)})

    def repo_config(self, ref: IssueRef) -> str | None:
        for path in CONFIG_PATHS:
            quoted = urllib.parse.quote(path, safe="")
            try:
                resp = self._client.request(
                    "GET",
                    f"/projects/{int(ref.project_id or 0)}/repository/files/{quoted}/raw",
                    params={"ref": ref.default_branch or "HEAD"},
                    raw=True,
                )
            except ApiError as exc:
                if exc.status == 404:
                    continue
                raise
            return str(resp.data or "")[:_MAX_CONFIG]
        return None

    @staticmethod
    def _issue(ref: IssueRef) -> str:
        return f"/projects/{int(ref.project_id or 0)}/issues/{int(ref.number)}"


def _author(user: Any) -> Author:
    if not isinstance(user, Mapping):
        return Author("")
    name = _str(user.get("username"))
    return Author(name, is_bot=bool(user.get("bot") is True or _BOT_NAME.search(name)))


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
