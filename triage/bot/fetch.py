"""Attached log files, fetched only when a repository enables it, within size and time limits.

Reporters attach `rank3.log` instead of pasting 10,000 lines. Fetching them makes the service
an HTTP client of whatever a stranger links, so: only hosts on the allow-list (redirects too:
GitHub's attachment links redirect to objects.githubusercontent.com), https only, no
credentials sent, one deadline for the whole transfer (a server dripping a byte a second does
not hold a worker), and a byte cap. A crash is at a log's end, so a log over the cap keeps its
first quarter and its last three quarters.

urllib rather than a client library: one GET with a redirect check, and the deadline and cap
have to be enforced around the reads anyway.
"""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .rest import USER_AGENT
from .settings import FetchLimits

__all__ = ["Fetched", "attachment_links", "fetch_log"]

_LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".json", ".jsonl")
_CHUNK = 64 * 1024
_MAX_REDIRECTS = 3


@dataclass(frozen=True)
class Fetched:
    url: str
    name: str  # the file's name, for the report
    text: str | None  # None: not read (note says why)
    note: str | None = None  # what was cut or why it was not read


def attachment_links(links: Iterable[str], limits: FetchLimits) -> list[str]:
    """The links worth fetching: on an allowed host, naming a log-like file."""
    out = []
    for url in links:
        parts = urllib.parse.urlsplit(url)
        name = parts.path.rsplit("/", 1)[-1].lower()
        if _allowed(parts, limits) and name.endswith(_LOG_SUFFIXES):
            out.append(url)
        if len(out) >= limits.max_links:
            break
    return out


def fetch_log(url: str, limits: FetchLimits) -> Fetched:
    """GET one attached log within `limits`; never raises."""
    parts = urllib.parse.urlsplit(url)
    name = urllib.parse.unquote(parts.path.rsplit("/", 1)[-1])[:80] or "attachment"
    if not _allowed(parts, limits):
        return Fetched(url, name, None, "not fetched: host not on the allow-list")
    opener = urllib.request.build_opener(_Redirects(limits))
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    deadline = time.monotonic() + limits.timeout_s
    try:
        with opener.open(request, timeout=limits.timeout_s) as resp:
            return _read(resp, url, name, limits, deadline)
    except urllib.error.HTTPError as exc:
        return Fetched(url, name, None, f"not fetched: HTTP {exc.code}")
    except urllib.error.URLError as exc:
        return Fetched(url, name, None, f"not fetched: {_reason(exc.reason)}")
    except TimeoutError:
        return Fetched(url, name, None, f"not fetched: no answer within {limits.timeout_s:g} s")
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return Fetched(url, name, None, f"not fetched: {type(exc).__name__}")


def _read(resp: Any, url: str, name: str, limits: FetchLimits, deadline: float) -> Fetched:
    head_cap = limits.max_bytes // 4
    tail_cap = limits.max_bytes - head_cap
    # past this, even the tail is not worth the transfer: stop and say so
    transfer_cap = limits.max_bytes * 8
    length = resp.headers.get("Content-Length")
    if length and length.isdigit() and int(length) > transfer_cap:
        return Fetched(url, name, None, f"not fetched: {int(length):,} bytes is over the limit")
    head = bytearray()
    tail: deque[bytes] = deque()
    tail_len = total = 0
    note = None
    sock = _socket(resp)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            note = f"cut after {limits.timeout_s:g} s"
            break
        if sock is not None:
            sock.settimeout(min(left, limits.timeout_s))
        try:
            chunk = resp.read1(_CHUNK) if hasattr(resp, "read1") else resp.read(_CHUNK)
        except TimeoutError:
            note = f"cut after {limits.timeout_s:g} s"
            break
        if not chunk:
            break
        total += len(chunk)
        if len(head) < head_cap:
            take = head_cap - len(head)
            head += chunk[:take]
            chunk = chunk[take:]
        if chunk:
            tail.append(chunk)
            tail_len += len(chunk)
            while tail and tail_len - len(tail[0]) >= tail_cap:
                tail_len -= len(tail.popleft())
        if total >= transfer_cap:
            note = f"cut after {transfer_cap:,} bytes"
            break
    tail_bytes = b"".join(tail)
    if len(tail_bytes) > tail_cap:
        tail_bytes = tail_bytes[-tail_cap:]
    data = bytes(head) + tail_bytes
    if b"\x00" in data[:8192]:
        return Fetched(url, name, None, "not read: not a text file")
    if total > len(data):
        cut = f"{total - len(data):,} bytes from the middle left out"
        note = f"{note}; {cut}" if note else cut
        gap = b"\n[... " + str(total - len(data)).encode() + b" bytes left out ...]\n"
        data = bytes(head) + gap + tail_bytes
    return Fetched(url, name, data.decode("utf-8", errors="replace"), note)


def _allowed(parts: urllib.parse.SplitResult, limits: FetchLimits) -> bool:
    if parts.scheme != "https" and not (parts.scheme == "http" and limits.allow_http):
        return False
    if parts.username or parts.password:
        return False
    host = (parts.hostname or "").lower()
    allowed = {h.lower() for h in limits.hosts}
    return bool(host) and (host in allowed or parts.netloc.lower() in allowed)


def _socket(resp: Any) -> socket.socket | None:
    # urllib gives no per-read deadline; the socket's timeout is narrowed before each read.
    fp = getattr(resp, "fp", None)
    raw = getattr(getattr(fp, "raw", None), "_sock", None)
    return raw if isinstance(raw, socket.socket) else None


def _reason(reason: object) -> str:
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "no answer in time"
    return str(reason)[:200]


class _Redirects(urllib.request.HTTPRedirectHandler):
    max_redirections = _MAX_REDIRECTS

    def __init__(self, limits: FetchLimits) -> None:
        self._limits = limits

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> Any:
        if not _allowed(urllib.parse.urlsplit(newurl), self._limits):
            raise urllib.error.URLError("redirected to a host not on the allow-list")
        return super().redirect_request(req, fp, code, msg, headers, newurl)
