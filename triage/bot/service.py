"""`triage serve`: the webhook service for GitHub and GitLab.

    POST /        a delivery: GitHub (`X-GitHub-Event`, signed with `X-Hub-Signature-256`)
                  or GitLab (`X-Gitlab-Event`, `X-Gitlab-Token`)
    GET  /health  200 and the queue's state while the workers are alive

A delivery is checked in the order that costs least to an attacker's benefit: size from the
header (413, the body is never read), authenticity (401: a bad or missing signature or token,
compared in constant time; nothing else is looked at), replay (200, already seen: by delivery
id and by the body's digest, since the id header is not covered by the signature), what it is
(202 ignored for events the bot does not answer), the repository allow-list (403), then the
bounded work queue (202 accepted, or 503 with Retry-After when full). The diagnosis runs on a
few worker threads, never on the thread that answers the delivery, so a burst of deliveries
queues or is turned away while /health keeps answering. Deliveries for one issue are handled
one at a time, so an edit and a `/triage` arriving together still leave one comment.

On the standard library's http.server (ThreadingHTTPServer) rather than a web framework: two
routes and no templates; the limits that matter (connections, body size, queue) are a few
lines around it and would be the same in any framework.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import github, gitlab
from .core import Ignored, Request, Tracker, respond
from .rest import ApiError, RetryPolicy
from .settings import ServiceSettings

__all__ = ["Service"]

log = logging.getLogger("triage.bot")

_SEEN = 10_000  # delivery ids and body digests remembered for replay checks
_LOCKS = 64  # striped per-issue locks: one issue's deliveries never run at once
_RETRY_AFTER_S = 30
_LINGER_S = 1.0  # after a 413: how long, and how much, of the unread body is dropped
_LINGER_BYTES = 4 * 2**20


@dataclass
class _Job:
    tracker: str
    request: Request
    delivery: str


class Service:
    """The webhook service: `start()` binds and runs it in background threads, `close()`
    stops it; `serve_forever()` is the blocking form for the command line."""

    def __init__(
        self,
        settings: ServiceSettings,
        *,
        github_secret: str | None,
        gitlab_secret: str | None,
        github_token: str | None,
        gitlab_token: str | None,
        retry: RetryPolicy = RetryPolicy(),
    ) -> None:
        if not github_secret and not gitlab_secret:
            raise ValueError("no webhook secret: set TRIAGE_WEBHOOK_SECRET")
        self.settings = settings
        self._github_secret = (github_secret or "").encode("utf-8")
        self._gitlab_secret = gitlab_secret or ""
        self.trackers: dict[str, Tracker] = {
            "github": github.GitHub.connect(settings.github_api_url, github_token, retry=retry),
            "gitlab": gitlab.GitLab.connect(settings.gitlab_api_url, gitlab_token, retry=retry),
        }
        self.queue: queue.Queue[_Job | None] = queue.Queue(maxsize=settings.queue_size)
        self._seen: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self._seen_lock = threading.Lock()
        self._issue_locks = [threading.Lock() for _ in range(_LOCKS)]
        self._stats: dict[str, int] = dict.fromkeys(
            ("accepted", "busy", "duplicate", "ignored", "unauthorized", "forbidden",
             "too_large", "bad_request", "processed", "failed", "max_queued",
             "max_connections_seen"),
            0,
        )  # fmt: skip
        self._stats_lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._server: _Server | None = None
        self._server_thread: threading.Thread | None = None

    @classmethod
    def from_env(cls, settings: ServiceSettings, env: Mapping[str, str]) -> Service:
        """Secrets and tokens from the environment: TRIAGE_WEBHOOK_SECRET (GitLab's may differ:
        TRIAGE_GITLAB_WEBHOOK_SECRET), GITHUB_TOKEN, GITLAB_TOKEN."""
        secret = env.get("TRIAGE_WEBHOOK_SECRET") or None
        return cls(
            settings,
            github_secret=secret,
            gitlab_secret=env.get("TRIAGE_GITLAB_WEBHOOK_SECRET") or secret,
            github_token=env.get("GITHUB_TOKEN") or None,
            gitlab_token=env.get("GITLAB_TOKEN") or None,
        )

    # ------------------------------------------------------------------ life cycle

    def start(self, host: str, port: int) -> tuple[str, int]:
        """Bind, start the workers and the server thread; the address actually bound."""
        self._server = _Server((host, port), _Handler, self)
        for n in range(self.settings.workers):
            worker = threading.Thread(target=self._work, name=f"triage-worker-{n}", daemon=True)
            worker.start()
            self._workers.append(worker)
        # a short poll: close() (shutdown) waits up to one interval for the loop to notice
        self._server_thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="triage-serve",
            daemon=True,
        )
        self._server_thread.start()
        bound = self._server.server_address
        return str(bound[0]), int(bound[1])

    def serve_forever(self, host: str, port: int) -> None:
        address = self.start(host, port)
        log.info("triage serve: listening on http://%s:%d", *address)
        try:
            while self._server_thread is not None and self._server_thread.is_alive():
                self._server_thread.join(1.0)
        finally:
            self.close()

    def close(self, timeout: float = 10.0) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for _ in self._workers:
            self.queue.put(None)  # blocks only until a worker takes the job before it
        for worker in self._workers:
            worker.join(timeout)
        self._workers = []

    def drain(self, timeout: float = 60.0) -> bool:
        """Wait until every accepted delivery has been handled (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.queue.unfinished_tasks == 0:
                return True
            time.sleep(0.02)
        return False

    # ------------------------------------------------------------------ requests

    def health(self) -> tuple[int, dict[str, Any]]:
        alive = sum(w.is_alive() for w in self._workers)
        with self._stats_lock:
            stats = dict(self._stats)
        status = 200 if alive == len(self._workers) and alive > 0 else 503
        return status, {
            "status": "ok" if status == 200 else "degraded",
            "queued": self.queue.qsize(),
            "queue_size": self.settings.queue_size,
            "workers": alive,
            **stats,
        }

    def delivery(self, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        """One POSTed delivery, its body read: the status and JSON answer."""
        if headers.get("X-GitHub-Event") is not None:
            tracker = "github"
            event = headers.get("X-GitHub-Event") or ""
            good = github.verify_signature(
                self._github_secret, body, headers.get("X-Hub-Signature-256")
            )
            delivery = headers.get("X-GitHub-Delivery") or ""
        elif headers.get("X-Gitlab-Event") is not None:
            tracker = "gitlab"
            event = headers.get("X-Gitlab-Event") or ""
            good = gitlab.verify_token(self._gitlab_secret, headers.get("X-Gitlab-Token"))
            delivery = headers.get("X-Gitlab-Event-UUID") or headers.get("Idempotency-Key") or ""
        else:
            return self._count("bad_request", 400, "not a GitHub or GitLab webhook delivery")
        if not good:
            return self._count("unauthorized", 401, "bad or missing signature")
        if tracker == "github" and event == "ping":
            return 200, {"status": "pong"}
        keys = [("body", tracker, hashlib.sha256(body).hexdigest())]
        if delivery:
            keys.append(("id", tracker, delivery[:200]))
        if not self._first_time(keys):
            return self._count("duplicate", 200, "this delivery was already received", "duplicate")
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            return self._count("bad_request", 400, "the body is not JSON")
        if tracker == "github":
            req = github.parse_event(event, payload)
        else:
            if event not in gitlab.HOOKS:
                return self._count("ignored", 202, f"{event[:60]} is not answered", "ignored")
            req = gitlab.parse_event(payload)
        if isinstance(req, Ignored):
            return self._count("ignored", 202, req.reason, "ignored")
        if not self.settings.allows(req.ref.repo):
            log.info("%s: not on the allow-list; delivery %s refused", req.ref.repo, delivery)
            return self._count("forbidden", 403, "this repository is not served here")
        if req.actor.is_bot:
            return self._count("ignored", 202, "the event came from a bot", "ignored")
        try:
            self.queue.put_nowait(_Job(tracker, req, delivery))
        except queue.Full:
            self._forget(keys)  # a redelivery later must not be taken for a replay
            status, answer = self._count("busy", 503, "the work queue is full; retry later")
            answer["retry_after"] = _RETRY_AFTER_S
            return status, answer
        with self._stats_lock:
            self._stats["accepted"] += 1
            self._stats["max_queued"] = max(self._stats["max_queued"], self.queue.qsize())
        return 202, {"status": "accepted"}

    # ------------------------------------------------------------------ workers

    def _work(self) -> None:
        while True:
            job = self.queue.get()
            try:
                if job is None:
                    return
                self._handle(job)
            finally:
                self.queue.task_done()

    def _handle(self, job: _Job) -> None:
        ref = job.request.ref
        where = f"{ref.tracker}:{ref.repo}#{ref.number}"
        lock = self._issue_locks[hash((ref.tracker, ref.repo, ref.number)) % _LOCKS]
        try:
            with lock:
                outcome = respond(job.request, self.trackers[job.tracker], self.settings)
            log.info("%s: %s (%s)", where, outcome.action, outcome.reason)
            key = "processed"
        except ApiError as exc:
            log.warning("%s: %s", where, exc)
            key = "failed"
        except Exception:  # noqa: BLE001 - one bad delivery must not stop the worker
            log.exception("%s: internal error", where)
            key = "failed"
        with self._stats_lock:
            self._stats[key] += 1

    # ------------------------------------------------------------------ bookkeeping

    def count(self, stat: str) -> None:
        with self._stats_lock:
            self._stats[stat] += 1

    def note_connections(self, now: int) -> None:
        with self._stats_lock:
            self._stats["max_connections_seen"] = max(self._stats["max_connections_seen"], now)

    def _count(
        self, stat: str, status: int, message: str, word: str = "error"
    ) -> tuple[int, dict[str, Any]]:
        self.count(stat)
        return status, {"status": word, "message": message}

    def _first_time(self, keys: list[tuple[str, ...]]) -> bool:
        with self._seen_lock:
            if any(k in self._seen for k in keys):
                return False
            for k in keys:
                self._seen[k] = None
            while len(self._seen) > _SEEN:
                self._seen.popitem(last=False)
            return True

    def _forget(self, keys: list[tuple[str, ...]]) -> None:
        with self._seen_lock:
            for k in keys:
                self._seen.pop(k, None)


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer with a cap on connections handled at once: past it, the accept
    loop waits and the kernel's backlog holds the rest, instead of one thread per socket."""

    daemon_threads = True
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], handler: type, service: Service) -> None:
        self.service = service
        self._slots = threading.BoundedSemaphore(service.settings.max_connections)
        self._open = 0
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        self._slots.acquire()
        with self._open_lock:
            self._open += 1
            self.service.note_connections(self._open)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._done()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done()

    def _done(self) -> None:
        with self._open_lock:
            self._open -= 1
        self._slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 10  # seconds a client may take per read: a slow sender cannot hold a slot
    protocol_version = "HTTP/1.1"
    server_version = "triage-serve"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.split("?", 1)[0] in ("/health", "/healthz"):
            self._answer(*self.server.service.health())
        else:
            self._answer(404, {"status": "error", "message": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        service = self.server.service
        if self.path.split("?", 1)[0] != "/":
            self._answer(404, {"status": "error", "message": "deliveries go to POST /"}, True)
            return
        if self.headers.get("Transfer-Encoding"):
            self._answer(411, {"status": "error", "message": "send a Content-Length"}, True)
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.strip().isdigit():
            self._answer(411, {"status": "error", "message": "send a Content-Length"}, True)
            return
        size = int(length)
        if size > service.settings.max_payload_bytes:
            service.count("too_large")
            limit = service.settings.max_payload_bytes
            message = f"payload of {size} bytes is over the limit of {limit}"
            self._answer(413, {"status": "error", "message": message}, True)
            self._linger()
            return
        try:
            body = self.rfile.read(size)
        except OSError:
            self.close_connection = True
            return
        if len(body) < size:
            self._answer(400, {"status": "error", "message": "the body ended early"}, True)
            return
        status, answer = service.delivery(self.headers, body)
        self._answer(status, answer)

    def do_PUT(self) -> None:  # noqa: N802
        self._answer(405, {"status": "error", "message": "POST / or GET /health"}, True)

    do_DELETE = do_PATCH = do_PUT  # noqa: N815

    def _answer(self, status: int, answer: Mapping[str, Any], close: bool = False) -> None:
        data = json.dumps(answer).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 503:
                self.send_header("Retry-After", str(_RETRY_AFTER_S))
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True  # the client went away; nothing to tell it

    def _linger(self) -> None:
        """Close after an answer sent before the body was read: stop writing, then drop what
        the client still sends for a moment. Closing at once would reset the connection and
        the client could lose the answer (a lingering close, as web servers do)."""
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(_LINGER_S)
            deadline = time.monotonic() + _LINGER_S
            dropped = 0
            while time.monotonic() < deadline and dropped < _LINGER_BYTES:
                chunk = self.connection.recv(65536)
                if not chunk:
                    break
                dropped += len(chunk)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        log.debug("%s %s", self.address_string(), format % args)
