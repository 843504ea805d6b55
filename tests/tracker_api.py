"""A real HTTP server on loopback that answers like the GitHub and GitLab REST APIs.

It stands in for the trackers in the bot's tests (the bot under test talks to it over HTTP,
exactly as to api.github.com): it keeps issues, comments, notes, labels and repository files
in memory, records every request, and can be told to fail the next N requests that match
(5xx, 403/429 rate limits with Retry-After or x-ratelimit headers) to exercise the bot's
retries. It also serves files for the attachment-fetch tests (slowly, or redirecting, on
request).

    api = TrackerAPI().start()
    api.add_github_issue("octo/train", 7)
    api.fail("POST", r"/comments$", 429, {"Retry-After": "1"})
    ... run the bot against api.github_url ...
    api.comments("octo/train", 7)      # what the bot posted
    api.stop()
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GITHUB_PREFIX = "/api/v3"  # as GitHub Enterprise: proves --api-url with a path works
GITLAB_PREFIX = "/api/v4"
GITHUB_MAX_BODY = 65_536  # GitHub's limit on a comment's characters


@dataclass
class Recorded:
    method: str
    path: str  # without the API prefix or query
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    status: int = 0


@dataclass
class _Failure:
    method: str
    pattern: re.Pattern[str]
    status: int
    headers: dict[str, str]
    body: dict[str, Any]
    times: int
    after: bool  # carry the request out, then answer the failure (a lost answer)


@dataclass
class _User:
    login: str
    kind: str = "User"  # User | Bot
    can_ask_who: bool = True  # False: an Actions token, GET /user answers 403


@dataclass
class _Thread:
    comments: list[dict[str, Any]] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)


class TrackerAPI:
    def __init__(self, page_size: int = 100) -> None:
        self.page_size = page_size
        self.lock = threading.Lock()
        self.requests: list[Recorded] = []
        self.users: dict[str, _User] = {}
        self.github: dict[tuple[str, int], _Thread] = {}
        self.gitlab: dict[tuple[int, int], _Thread] = {}
        self.files: dict[tuple[str, str], str] = {}  # (repo or project id, path) -> text
        self.served: dict[str, tuple[bytes, float, str | None]] = {}  # /files/x: body, delay/KB
        self._failures: list[_Failure] = []
        self._next_id = 1000
        self._server: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------ life cycle

    def start(self) -> TrackerAPI:
        api = self

        class Handler(_Handler):
            state = api

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        serve = self._server.serve_forever
        threading.Thread(target=serve, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def github_url(self) -> str:
        return self.url + GITHUB_PREFIX

    @property
    def gitlab_url(self) -> str:
        return self.url + GITLAB_PREFIX

    # ------------------------------------------------------------------ set-up

    def add_user(
        self, token: str, login: str, kind: str = "User", can_ask_who: bool = True
    ) -> None:
        self.users[token] = _User(login, kind, can_ask_who)

    def add_github_issue(
        self, repo: str, number: int, comments: tuple[tuple[str, str], ...] = ()
    ) -> None:
        thread = self.github.setdefault((repo, number), _Thread())
        for login, body in comments:
            thread.comments.append(self._comment(login, "User", body))

    def add_gitlab_issue(
        self, project_id: int, iid: int, notes: tuple[tuple[str, str], ...] = ()
    ) -> None:
        thread = self.gitlab.setdefault((project_id, iid), _Thread())
        for username, body in notes:
            thread.comments.append(self._note(username, body))

    def fail(
        self,
        method: str,
        pattern: str,
        status: int,
        headers: dict[str, str] | None = None,
        *,
        times: int = 1,
        message: str = "failure on request",
        after: bool = False,
    ) -> None:
        """The next `times` requests of `method` whose path matches `pattern` get `status`
        (`after`: once the request was carried out, as when the answer is lost)."""
        failure = _Failure(
            method, re.compile(pattern), status, headers or {}, {"message": message}, times, after
        )
        with self.lock:
            self._failures.append(failure)

    def serve_file(
        self, name: str, data: bytes, delay_per_kb: float = 0.0, redirect: str | None = None
    ) -> str:
        self.served[name] = (data, delay_per_kb, redirect)
        return f"{self.url}/files/{name}"

    # ------------------------------------------------------------------ reading back

    def comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(c) for c in self.github.get((repo, number), _Thread()).comments]

    def notes(self, project_id: int, iid: int) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(c) for c in self.gitlab.get((project_id, iid), _Thread()).comments]

    def labels(self, key: tuple[Any, int]) -> list[str]:
        with self.lock:
            thread = self.github.get(key) or self.gitlab.get(key) or _Thread()
            return list(thread.labels)

    def writes(self) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method in ("POST", "PATCH", "PUT", "DELETE")]

    def calls(self, method: str, pattern: str) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method == method and re.search(pattern, r.path)]

    # ------------------------------------------------------------------ internals

    def _comment(self, login: str, kind: str, body: str) -> dict[str, Any]:
        self._next_id += 1
        return {"id": self._next_id, "user": {"login": login, "type": kind}, "body": body}

    def _note(self, username: str, body: str, system: bool = False) -> dict[str, Any]:
        self._next_id += 1
        return {
            "id": self._next_id,
            "author": {"username": username},
            "body": body,
            "system": system,
        }

    def _failure(self, method: str, path: str) -> _Failure | None:
        with self.lock:
            for f in self._failures:
                if f.times > 0 and f.method == method and f.pattern.search(path):
                    f.times -= 1
                    return f
        return None


class _Handler(BaseHTTPRequestHandler):
    state: TrackerAPI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_PATCH(self) -> None:  # noqa: N802
        self._dispatch("PATCH")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    # ------------------------------------------------------------------ plumbing

    def _dispatch(self, method: str) -> None:
        api = self.state
        parts = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(parts.query))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        path = parts.path
        if path.startswith("/files/"):
            with api.lock:
                api.requests.append(Recorded(method, path, query, dict(self.headers), None, 200))
            self._file(path[len("/files/") :])
            return
        tracker = (
            "github"
            if path.startswith(GITHUB_PREFIX)
            else "gitlab"
            if path.startswith(GITLAB_PREFIX)
            else ""
        )
        if tracker:
            path = path[len(GITHUB_PREFIX if tracker == "github" else GITLAB_PREFIX) :]
        record = Recorded(
            method, path, query, {k.lower(): v for k, v in self.headers.items()}, body
        )
        with api.lock:
            api.requests.append(record)
        failure = api._failure(method, path)
        if failure is not None and not failure.after:
            record.status = failure.status
            self._json(failure.status, failure.body, failure.headers)
            return
        if not tracker:
            record.status = 404
            self._json(404, {"message": "Not Found"})
            return
        user = self._user(tracker)
        handler = _github if tracker == "github" else _gitlab
        status, data, headers = handler(api, method, path, query, body, user)
        if failure is not None:
            status, data, headers = failure.status, failure.body, failure.headers
        record.status = status
        if isinstance(data, str):
            self._send(status, data.encode(), "text/plain; charset=utf-8", headers)
        else:
            self._json(status, data, headers)

    def _user(self, tracker: str) -> _User | None:
        if tracker == "github":
            auth = self.headers.get("Authorization", "")
            token = auth.split(" ", 1)[1] if " " in auth else ""
        else:
            token = self.headers.get("PRIVATE-TOKEN", "")
        return self.state.users.get(token)

    def _file(self, name: str) -> None:
        served = self.state.served.get(name)
        if served is None:
            self._json(404, {"message": "Not Found"})
            return
        data, delay, redirect = served
        if redirect:
            self.send_response(302)
            self.send_header("Location", redirect)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            for i in range(0, len(data), 1024):
                self.wfile.write(data[i : i + 1024])
                self.wfile.flush()
                if delay:
                    time.sleep(delay)
        except OSError:
            pass  # the client stopped reading: what the limits are for

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(data).encode(), "application/json; charset=utf-8", headers)

    def _send(self, status: int, data: bytes, kind: str, headers: dict[str, str] | None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


Answer = tuple[int, Any, dict[str, str]]


def _page(api: TrackerAPI, items: list[Any], query: dict[str, str], base: str) -> Answer:
    size = min(int(query.get("per_page", 30)), api.page_size)
    page = int(query.get("page", 1))
    chunk = items[(page - 1) * size : page * size]
    headers = {}
    if page * size < len(items):
        nxt = dict(query, page=str(page + 1))
        url = f"{api.url}{base}?{urllib.parse.urlencode(nxt)}"
        headers["Link"] = f'<{url}>; rel="next"'
        headers["X-Next-Page"] = str(page + 1)
    return 200, chunk, headers


def _github(
    api: TrackerAPI, method: str, path: str, query: dict[str, str], body: Any, user: _User | None
) -> Answer:
    if path == "/user" and method == "GET":
        if user is None:
            return 401, {"message": "Requires authentication"}, {}
        if not user.can_ask_who:
            return 403, {"message": "Resource not accessible by integration"}, {}
        return 200, {"login": user.login, "type": user.kind}, {}
    m = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(\d+)/comments", path)
    if m:
        key = (m.group(1), int(m.group(2)))
        with api.lock:
            thread = api.github.get(key)
            if thread is None:
                return 404, {"message": "Not Found"}, {}
            if method == "GET":
                return _page(api, [dict(c) for c in thread.comments], query, GITHUB_PREFIX + path)
            if method == "POST":
                if user is None:
                    return 401, {"message": "Requires authentication"}, {}
                text = body.get("body") if isinstance(body, dict) else None
                if not isinstance(text, str) or len(text) > GITHUB_MAX_BODY:
                    return 422, {"message": "Validation Failed"}, {}
                comment = api._comment(user.login, user.kind, text)
                thread.comments.append(comment)
                return 201, comment, {}
    m = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/comments/(\d+)", path)
    if m and method == "PATCH":
        if user is None:
            return 401, {"message": "Requires authentication"}, {}
        with api.lock:
            for (repo, _), thread in api.github.items():
                for comment in thread.comments:
                    if repo == m.group(1) and comment["id"] == int(m.group(2)):
                        if comment["user"]["login"] != user.login:
                            return 403, {"message": "Must have admin rights to Repository."}, {}
                        comment["body"] = body["body"]
                        return 200, comment, {}
        return 404, {"message": "Not Found"}, {}
    m = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(\d+)/labels", path)
    if m and method == "POST":
        if user is None:
            return 401, {"message": "Requires authentication"}, {}
        with api.lock:
            thread = api.github.get((m.group(1), int(m.group(2))))
            if thread is None:
                return 404, {"message": "Not Found"}, {}
            for label in body.get("labels", []):
                if label not in thread.labels:
                    thread.labels.append(label)
            return 200, [{"name": label} for label in thread.labels], {}
    m = re.fullmatch(r"/repos/([^/]+/[^/]+)/contents/(.+)", path)
    if m and method == "GET":
        text = api.files.get((m.group(1), m.group(2)))
        if text is None:
            return 404, {"message": "Not Found"}, {}
        return 200, text, {}
    return 404, {"message": "Not Found"}, {}


def _gitlab(
    api: TrackerAPI, method: str, path: str, query: dict[str, str], body: Any, user: _User | None
) -> Answer:
    if path == "/user" and method == "GET":
        if user is None:
            return 401, {"message": "401 Unauthorized"}, {}
        return 200, {"username": user.login, "bot": user.kind == "Bot"}, {}
    m = re.fullmatch(r"/projects/(\d+)/issues/(\d+)/notes(?:/(\d+))?", path)
    if m:
        key = (int(m.group(1)), int(m.group(2)))
        with api.lock:
            thread = api.gitlab.get(key)
            if thread is None:
                return 404, {"message": "404 Not found"}, {}
            if method == "GET" and m.group(3) is None:
                return _page(api, [dict(c) for c in thread.comments], query, GITLAB_PREFIX + path)
            if user is None:
                return 401, {"message": "401 Unauthorized"}, {}
            if method == "POST" and m.group(3) is None:
                note = api._note(user.login, body["body"])
                thread.comments.append(note)
                return 201, note, {}
            if method == "PUT" and m.group(3) is not None:
                for note in thread.comments:
                    if note["id"] == int(m.group(3)):
                        if note["author"]["username"] != user.login:
                            return 403, {"message": "403 Forbidden"}, {}
                        note["body"] = body["body"]
                        return 200, note, {}
                return 404, {"message": "404 Not found"}, {}
    m = re.fullmatch(r"/projects/(\d+)/issues/(\d+)", path)
    if m and method == "PUT":
        if user is None:
            return 401, {"message": "401 Unauthorized"}, {}
        with api.lock:
            thread = api.gitlab.get((int(m.group(1)), int(m.group(2))))
            if thread is None:
                return 404, {"message": "404 Not found"}, {}
            for label in str(body.get("add_labels", "")).split(","):
                if label and label not in thread.labels:
                    thread.labels.append(label)
            return 200, {"labels": thread.labels}, {}
    m = re.fullmatch(r"/projects/(\d+)/repository/files/([^/]+)/raw", path)
    if m and method == "GET":
        text = api.files.get((m.group(1), urllib.parse.unquote(m.group(2))))
        if text is None:
            return 404, {"message": "404 File Not Found"}, {}
        return 200, text, {}
    return 404, {"message": "404 Not found"}, {}


def github_issue_event(
    repo: str,
    number: int,
    body: str,
    *,
    action: str = "opened",
    title: str = "Training crashed",
    sender: str = "alice",
    sender_type: str = "User",
    labels: tuple[str, ...] = (),
) -> dict[str, Any]:
    issue = {
        "number": number,
        "title": title,
        "body": body,
        "user": {"login": sender, "type": sender_type},
        "labels": [{"name": label} for label in labels],
    }
    return {
        "action": action,
        "issue": issue,
        "repository": {"full_name": repo, "default_branch": "main"},
        "sender": {"login": sender, "type": sender_type},
    }


def github_comment_event(
    repo: str,
    number: int,
    issue_body: str,
    comment_id: int,
    comment: str,
    *,
    sender: str = "carol",
    sender_type: str = "User",
    pull_request: bool = False,
) -> dict[str, Any]:
    event = github_issue_event(repo, number, issue_body, action="created")
    if pull_request:
        event["issue"]["pull_request"] = {"url": "https://example.invalid/pr"}
    event["comment"] = {
        "id": comment_id,
        "body": comment,
        "user": {"login": sender, "type": sender_type},
    }
    event["sender"] = {"login": sender, "type": sender_type}
    return event


def gitlab_issue_event(
    project_id: int,
    path: str,
    iid: int,
    description: str,
    *,
    action: str = "open",
    username: str = "alice",
    changes: dict[str, Any] | None = None,
    web_url: str = "https://gitlab.example.com/ml/train",
) -> dict[str, Any]:
    return {
        "object_kind": "issue",
        "event_type": "issue",
        "user": {"username": username, "name": username.title()},
        "project": {
            "id": project_id,
            "path_with_namespace": path,
            "default_branch": "main",
            "web_url": web_url,
        },
        "object_attributes": {
            "iid": iid,
            "title": "Job hangs",
            "description": description,
            "action": action,
            "author_id": 5,
        },
        "changes": changes or {},
        "labels": [],
    }


def gitlab_note_event(
    project_id: int,
    path: str,
    iid: int,
    description: str,
    note_id: int,
    note: str,
    *,
    username: str = "carol",
    noteable_type: str = "Issue",
) -> dict[str, Any]:
    return {
        "object_kind": "note",
        "event_type": "note",
        "user": {"username": username},
        "project": {
            "id": project_id,
            "path_with_namespace": path,
            "default_branch": "main",
            "web_url": "https://gitlab.example.com/ml/train",
        },
        "object_attributes": {
            "id": note_id,
            "note": note,
            "noteable_type": noteable_type,
            "action": "create",
        },
        "issue": {"iid": iid, "title": "Job hangs", "description": description, "author_id": 5},
    }
