"""`triage serve`: the webhook service, over real sockets.

The service under test listens on loopback and is sent deliveries over HTTP exactly as GitHub
and GitLab send them (signed bodies, their headers); it answers issues through a second
loopback server that stands in for the trackers' APIs (tests/tracker_api.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from bot_samples import FAST_RETRY, SETTINGS, SHM_BODY, VAGUE_BODY
from click.testing import CliRunner
from tracker_api import (
    TrackerAPI,
    github_comment_event,
    github_issue_event,
    gitlab_issue_event,
    gitlab_note_event,
)

from triage.bot.comment import MARKER
from triage.bot.service import Service
from triage.cli import main

SECRET = "webhook-secret-used-only-in-tests"
REPO = "octo/train"


@pytest.fixture
def api() -> Any:
    api = TrackerAPI().start()
    api.add_user("pat-service", "triage-bot", "User")
    api.add_user("glpat-service", "project_42_bot", "Bot")
    yield api
    api.stop()


@pytest.fixture
def serve(api: TrackerAPI) -> Any:
    started: list[Service] = []

    def start(**overrides: Any) -> tuple[Service, tuple[str, int]]:
        settings = dataclasses.replace(
            SETTINGS, github_api_url=api.github_url, gitlab_api_url=api.gitlab_url, **overrides
        )
        service = Service(
            settings,
            github_secret=SECRET,
            gitlab_secret=SECRET,
            github_token="pat-service",
            gitlab_token="glpat-service",
            retry=FAST_RETRY,
        )
        address = service.start("127.0.0.1", 0)
        started.append(service)
        return service, address

    yield start
    for service in started:
        service.close()


def post(
    address: tuple[str, int],
    body: bytes,
    headers: dict[str, str],
    path: str = "/",
) -> tuple[int, dict[str, Any], dict[str, str]]:
    conn = http.client.HTTPConnection(*address, timeout=30)
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data or b"{}"), {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def github_delivery(
    address: tuple[str, int],
    event: str,
    payload: Any,
    *,
    secret: str = SECRET,
    delivery: str | None = None,
    signature: str | None = None,
) -> tuple[int, dict[str, Any], dict[str, str]]:
    body = json.dumps(payload).encode()
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "Content-Type": "application/json",
    }
    if signature is None:
        signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if signature:
        headers["X-Hub-Signature-256"] = signature
    return post(address, body, headers)


def get(address: tuple[str, int], path: str, timeout: float = 10) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection(*address, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def test_a_signed_delivery_of_a_new_issue_gets_a_comment(api: TrackerAPI, serve: Any) -> None:
    service, address = serve()
    api.add_github_issue(REPO, 1)
    status, answer, _ = github_delivery(address, "issues", github_issue_event(REPO, 1, SHM_BODY))
    assert (status, answer["status"]) == (202, "accepted")
    assert service.drain()
    [comment] = api.comments(REPO, 1)
    assert comment["body"].startswith(MARKER) and "`R05`" in comment["body"]


def test_an_edited_issue_updates_the_bots_comment(api: TrackerAPI, serve: Any) -> None:
    service, address = serve()
    api.add_github_issue(REPO, 2)
    github_delivery(address, "issues", github_issue_event(REPO, 2, VAGUE_BODY))
    assert service.drain()
    edited = github_issue_event(REPO, 2, SHM_BODY, action="edited")
    status, _, _ = github_delivery(address, "issues", edited)
    assert status == 202
    assert service.drain()
    [comment] = api.comments(REPO, 2)
    assert "`R05`" in comment["body"]
    assert len(api.calls("PATCH", r"/issues/comments/\d+$")) == 1


def test_an_edit_and_a_command_arriving_together_still_leave_one_comment(
    api: TrackerAPI, serve: Any
) -> None:
    service, address = serve(workers=4)
    api.add_github_issue(REPO, 3)
    events = [
        ("issues", github_issue_event(REPO, 3, SHM_BODY)),
        ("issues", github_issue_event(REPO, 3, SHM_BODY + "\nmore", action="edited")),
        ("issue_comment", github_comment_event(REPO, 3, SHM_BODY, 50, "/triage")),
        ("issue_comment", github_comment_event(REPO, 3, SHM_BODY, 51, "/triage\nagain")),
    ]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda e: github_delivery(address, *e), events))
    assert service.drain()
    assert len([c for c in api.comments(REPO, 3) if c["body"].startswith(MARKER)]) == 1


@pytest.mark.parametrize(
    "signature",
    [
        "",  # missing
        "sha256=" + "0" * 64,
        "sha1=0123456789abcdef0123456789abcdef01234567",  # the old header's form
        "sha256=" + hmac.new(b"another secret", b"{}", hashlib.sha256).hexdigest(),
        "not a signature at all \u00e9",
    ],
)
def test_a_bad_or_missing_signature_is_refused_and_nothing_is_done(
    api: TrackerAPI, serve: Any, signature: str
) -> None:
    service, address = serve()
    api.add_github_issue(REPO, 4)
    event = github_issue_event(REPO, 4, SHM_BODY)
    status, answer, _ = github_delivery(address, "issues", event, signature=signature)
    assert status == 401
    assert answer["status"] == "error"
    assert service.drain()
    assert api.requests == []
    assert service.health()[1]["unauthorized"] == 1


def test_a_body_signed_with_another_secret_is_refused(api: TrackerAPI, serve: Any) -> None:
    _, address = serve()
    event = github_issue_event(REPO, 4, SHM_BODY)
    status, _, _ = github_delivery(address, "issues", event, secret="not-the-secret")
    assert status == 401


def test_a_replayed_delivery_is_ignored(api: TrackerAPI, serve: Any) -> None:
    service, address = serve()
    api.add_github_issue(REPO, 5)
    event = github_issue_event(REPO, 5, SHM_BODY)
    assert github_delivery(address, "issues", event, delivery="d-1")[0] == 202
    # the same delivery again, and the same signed body under a new id (the id is unsigned)
    again = github_delivery(address, "issues", event, delivery="d-1")
    new_id = github_delivery(address, "issues", event, delivery="d-2")
    assert (again[0], again[1]["status"]) == (200, "duplicate")
    assert (new_id[0], new_id[1]["status"]) == (200, "duplicate")
    assert service.drain()
    assert len(api.calls("POST", r"/issues/5/comments$")) == 1


def test_an_oversized_payload_is_refused_before_it_is_read(api: TrackerAPI, serve: Any) -> None:
    service, address = serve(max_payload_bytes=64 * 1024)
    # headers promise 10 MB; only a little is sent: the answer must not wait for the rest
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: issues\r\n"
            b"X-Hub-Signature-256: sha256=00\r\nContent-Length: 10000000\r\n\r\n" + b"{" * 1000
        )
        reply = b""
        while chunk := sock.recv(4096):  # the server closes after its answer
            reply += chunk
        reply = reply.decode()
    assert reply.startswith("HTTP/1.1 413")
    assert "over the limit of 65536" in reply
    # a body just over the limit, sent whole
    body = json.dumps(github_issue_event(REPO, 6, "x" * 70_000)).encode()
    status, _, _ = post(address, body, {"X-GitHub-Event": "issues"})
    assert status == 413
    assert service.health()[1]["too_large"] == 2
    assert api.requests == []


@pytest.mark.parametrize(
    ("request_text", "status"),
    [
        (b"POST / HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: issues\r\n\r\n", 411),
        (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411),
        (b"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 404),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 400),  # no tracker
        (b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        (b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n", 501),
        (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03garbage\r\n\r\n", 400),  # TLS hello
    ],
)
def test_malformed_requests_get_an_answer_not_a_crash(
    serve: Any, request_text: bytes, status: int
) -> None:
    service, address = serve()
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(request_text)
        reply = sock.recv(4096).decode("latin-1")
    # http.server answers a line it cannot read at all as HTTP/0.9: the page, no status line
    assert f" {status} " in reply.split("\r\n", 1)[0] or f"Error code: {status}" in reply
    assert get(address, "/health")[0] == 200  # and the service goes on


def test_a_signed_body_that_is_not_json_is_a_bad_request(api: TrackerAPI, serve: Any) -> None:
    _, address = serve()
    body = b"{not json"
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    status, _, _ = post(
        address, body, {"X-GitHub-Event": "issues", "X-Hub-Signature-256": signature}
    )
    assert status == 400


@pytest.mark.parametrize(
    ("event", "payload", "status", "word"),
    [
        ("ping", {"zen": "Keep it logically awesome."}, 200, "pong"),
        ("push", {"ref": "refs/heads/main", "repository": {"full_name": REPO}}, 202, "ignored"),
        ("issues", github_issue_event(REPO, 7, SHM_BODY, action="labeled"), 202, "ignored"),
        (
            "issues",
            github_issue_event(REPO, 7, SHM_BODY, sender="x[bot]", sender_type="Bot"),
            202,
            "ignored",
        ),  # noqa: E501
        (
            "issue_comment",
            github_comment_event(REPO, 7, "", 1, "/triage", pull_request=True),
            202,
            "ignored",
        ),  # noqa: E501
    ],
)
def test_events_the_bot_does_not_answer_are_acknowledged_and_dropped(
    api: TrackerAPI, serve: Any, event: str, payload: Any, status: int, word: str
) -> None:
    service, address = serve()
    got, answer, _ = github_delivery(address, event, payload)
    assert (got, answer["status"]) == (status, word)
    assert service.drain()
    assert api.requests == []


def test_repositories_off_the_allow_list_are_refused(api: TrackerAPI, serve: Any) -> None:
    service, address = serve(repositories=("octo/*", "ml/train"))
    api.add_github_issue(REPO, 8)
    api.add_github_issue("evil/repo", 8)
    refused = github_delivery(address, "issues", github_issue_event("evil/repo", 8, SHM_BODY))
    accepted = github_delivery(address, "issues", github_issue_event(REPO, 8, SHM_BODY))
    assert refused[0] == 403 and accepted[0] == 202
    assert service.drain()
    assert api.comments("evil/repo", 8) == [] and len(api.comments(REPO, 8)) == 1


def test_gitlab_hooks_are_checked_by_token_and_answered_with_a_note(
    api: TrackerAPI, serve: Any
) -> None:
    service, address = serve()
    api.add_gitlab_issue(42, 3)
    body = json.dumps(gitlab_issue_event(42, "ml/train", 3, SHM_BODY)).encode()
    headers = {"X-Gitlab-Event": "Issue Hook", "X-Gitlab-Event-UUID": "u-1"}
    assert post(address, body, {**headers, "X-Gitlab-Token": "wrong"})[0] == 401
    assert post(address, body, headers)[0] == 401  # no token
    assert post(address, body, {**headers, "X-Gitlab-Token": SECRET})[0] == 202
    assert post(address, body, {**headers, "X-Gitlab-Token": SECRET})[1]["status"] == "duplicate"
    note = gitlab_note_event(42, "ml/train", 3, SHM_BODY, 9, "/triage")
    note_headers = {"X-Gitlab-Event": "Note Hook", "X-Gitlab-Token": SECRET}
    assert post(address, json.dumps(note).encode(), note_headers)[0] == 202
    pipeline = {"X-Gitlab-Event": "Pipeline Hook", "X-Gitlab-Token": SECRET}
    assert post(address, b'{"object_kind": "pipeline"}', pipeline)[1]["status"] == "ignored"
    assert service.drain()
    notes = api.notes(42, 3)
    assert len(notes) == 1 and "`R05`" in notes[0]["body"]


def test_a_burst_of_500_deliveries_meets_a_bounded_queue_while_health_answers(
    api: TrackerAPI, serve: Any
) -> None:
    service, address = serve(queue_size=8, workers=2, max_connections=16)
    for n in range(1, 501):
        api.add_github_issue(REPO, n)
    health: list[tuple[int, float]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            started = time.monotonic()
            status, _ = get(address, "/health", timeout=10)
            health.append((status, time.monotonic() - started))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(32) as pool:
            answers = list(
                pool.map(
                    lambda n: github_delivery(
                        address, "issues", github_issue_event(REPO, n, SHM_BODY)
                    ),
                    range(1, 501),
                )
            )
    finally:
        done.set()
        watcher.join()
    statuses = Counter(status for status, _, _ in answers)
    assert set(statuses) <= {202, 503}, statuses
    assert statuses[503] > 0 and statuses[202] > 0, statuses  # the queue filled and drained
    assert all(h["retry-after"] == "30" for s, _, h in answers if s == 503)
    assert health and all(status == 200 for status, _ in health)
    assert max(latency for _, latency in health) < 5.0  # GitHub gives a delivery 10 s
    assert service.drain(120)
    stats = service.health()[1]
    assert stats["max_queued"] <= 8
    assert stats["max_connections_seen"] <= 16
    assert stats["accepted"] == statuses[202] and stats["busy"] == statuses[503]
    assert stats["processed"] == statuses[202] and stats["failed"] == 0
    # every accepted delivery got its comment, exactly one
    answered = [n for n in range(1, 501) if api.comments(REPO, n)]
    assert len(answered) == statuses[202]
    assert all(len(api.comments(REPO, n)) == 1 for n in answered)
    # a refused delivery is not remembered as seen: GitHub's redelivery is then answered
    refused = next(n for n in range(1, 501) if not api.comments(REPO, n))
    status, _, _ = github_delivery(address, "issues", github_issue_event(REPO, refused, SHM_BODY))
    assert status == 202


def test_an_api_failure_in_a_worker_is_counted_and_the_service_goes_on(
    api: TrackerAPI, serve: Any
) -> None:
    service, address = serve()
    api.add_github_issue(REPO, 9)
    api.add_github_issue(REPO, 10)
    api.fail("POST", r"/issues/9/comments$", 422, message="Validation Failed")
    github_delivery(address, "issues", github_issue_event(REPO, 9, SHM_BODY))
    github_delivery(address, "issues", github_issue_event(REPO, 10, SHM_BODY))
    assert service.drain()
    status, stats = get(address, "/health")
    assert status == 200 and stats["failed"] == 1 and stats["processed"] == 1
    assert len(api.comments(REPO, 10)) == 1


# ---------------------------------------------------------------------- the command line


def test_triage_serve_runs_as_a_process(api: TrackerAPI, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "bot.yaml"
    config.write_text(
        f"repositories: [octo/*]\nembeddings: false\ngitlab: {{api_url: {api.gitlab_url}}}\n"
        "limits: {queue_size: 4, workers: 1}\n"
    )
    env = {**os.environ, "TRIAGE_WEBHOOK_SECRET": SECRET, "GITHUB_TOKEN": "pat-service"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "triage", "serve", "--port", str(port), "--api-url",
         api.github_url, "--config", str(config)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        address = ("127.0.0.1", port)
        deadline = time.monotonic() + 30
        while True:
            try:
                status, health = get(address, "/health", timeout=2)
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "triage serve did not start"
                time.sleep(0.1)
        assert status == 200 and health["queue_size"] == 4
        api.add_github_issue(REPO, 11)
        status, _, _ = github_delivery(address, "issues", github_issue_event(REPO, 11, SHM_BODY))
        assert status == 202
        # done when the worker has logged it, not only posted it: then its log line is out
        deadline = time.monotonic() + 60
        while get(address, "/health")[1]["processed"] < 1:
            assert time.monotonic() < deadline, "the delivery was not handled"
            time.sleep(0.1)
        assert len(api.comments(REPO, 11)) == 1
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "listening on http://127.0.0.1" in err
    assert "octo/train#11: created" in err
    assert SECRET not in err and "pat-service" not in err


@pytest.mark.parametrize(
    ("config", "env", "message"),
    [
        (None, {"TRIAGE_WEBHOOK_SECRET": ""}, "no webhook secret"),
        ("limits: {queue_size: 0}\n", {"TRIAGE_WEBHOOK_SECRET": "s"}, "limits.queue_size"),
        ("repositories: octo\nwat: 1\n", {"TRIAGE_WEBHOOK_SECRET": "s"}, "unknown key 'wat'"),
        (": : :\n", {"TRIAGE_WEBHOOK_SECRET": "s"}, "not YAML"),
    ],
)
def test_serve_refuses_to_start_misconfigured(
    tmp_path: Path, config: str | None, env: dict[str, str], message: str
) -> None:
    args = ["serve", "--port", "0"]
    if config is not None:
        path = tmp_path / "bot.yaml"
        path.write_text(config)
        args += ["--config", str(path)]
    result = CliRunner().invoke(main, args, env={"TRIAGE_GITLAB_WEBHOOK_SECRET": "", **env})
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
