"""A small JSON client for the trackers' REST APIs, with their rate-limit rules.

Hand-written on `urllib.request` rather than requests/httpx: neither is a dependency of triage
(the Action installs into a bare runner), the bot needs four verbs and JSON, and the part that
matters, the trackers' own rate-limit rules, no generic client knows:

- GitHub answers 403 or 429 with `retry-after` (seconds) or `x-ratelimit-remaining: 0` and
  `x-ratelimit-reset` (epoch seconds); a secondary limit without either means "wait a minute"
  (docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-rest-api).
- GitLab answers 429 with `Retry-After` and `RateLimit-Reset`.

A rate-limited request was not carried out, so it is retried whatever its verb. A 5xx or a
broken connection is retried only for verbs that are safe to repeat: a POST that failed with a
502 may still have created the comment, and the caller (which can look) decides.
The token never appears in an error message: errors name the method and the path only.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ApiError", "RateLimited", "Response", "RestClient", "RetryPolicy"]

USER_AGENT = "triage-bot (+https://github.com/triage)"
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"})
_MAX_BODY = 16 * 2**20  # an API answer bigger than this is not one the bot asked for


class ApiError(Exception):
    """The API refused or failed a request (after any retries). `status` 0: no answer."""

    def __init__(self, status: int, method: str, path: str, message: str) -> None:
        self.status = status
        self.method = method
        self.path = path
        self.message = message
        where = f"{method} {path}"
        super().__init__(f"{where}: HTTP {status}: {message}" if status else f"{where}: {message}")


class RateLimited(ApiError):
    """Rate-limited for longer than the policy is willing to wait."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5  # tries in all, the first one included
    base_delay: float = 1.0  # backoff after a 5xx: base, 2x base, 4x base ... plus jitter
    max_delay: float = 30.0
    # a rate limit that asks for a longer wait than this ends the request: a worker must not
    # sleep for an hour on one issue
    max_wait: float = 120.0
    # a secondary rate limit that names no wait: GitHub says to wait at least a minute
    default_limit_wait: float = 60.0


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]  # lower-case names
    data: Any  # parsed JSON, or text when the answer was not JSON
    next_url: str | None  # rel="next" of the Link header, when on the same origin


class RestClient:
    """JSON over HTTP(S) against one API base URL (`https://api.github.com`,
    `https://ghe.example.com/api/v3`, `https://gitlab.com/api/v4`)."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float = 20.0,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"API URL must be http(s)://host[/path], not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._origin = (parts.scheme, parts.netloc)
        self._headers = {"User-Agent": USER_AGENT, **(headers or {})}
        self._timeout = timeout
        self._retry = retry
        self._sleep = sleep
        self._clock = clock
        # Never follow redirects: urllib would carry the Authorization header to wherever the
        # Location points. The trackers' APIs answer the URLs the bot builds without one.
        self._opener = urllib.request.build_opener(_NoRedirect)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        raw: bool = False,
    ) -> Response:
        """One API call; `path` is relative to the base URL or a full URL on its origin.
        `raw`: the answer is a file's text, kept as text even when it parses as JSON."""
        url = self._url(path, params)
        shown = urllib.parse.urlsplit(url).path
        data = None if body is None else json.dumps(body).encode("utf-8")
        all_headers = dict(self._headers)
        if data is not None:
            all_headers["Content-Type"] = "application/json"
        all_headers.update(headers or {})
        policy = self._retry
        failures = 0
        for attempt in range(1, policy.attempts + 1):
            last = attempt == policy.attempts
            try:
                status, resp_headers, body_bytes = self._once(method, url, data, all_headers)
            except _NoAnswer as exc:
                if method in _IDEMPOTENT and not last:
                    failures += 1
                    self._sleep(self._backoff(failures))
                    continue
                raise ApiError(0, method, shown, str(exc)) from None
            if 200 <= status < 300:  # a 3xx is an answer too: redirects are not followed
                data = _text(body_bytes) if raw else _decode(body_bytes)
                return Response(status, resp_headers, data, self._next(resp_headers))
            payload = _decode(body_bytes)
            message = _message(payload)
            wait = self._limit_wait(status, resp_headers, message)
            if wait is not None:
                if wait > policy.max_wait:
                    raise RateLimited(
                        status, method, shown, f"rate limited for {wait:.0f} s: {message}"
                    )
                if last:
                    raise RateLimited(status, method, shown, f"still rate limited: {message}")
                self._sleep(wait)
                continue
            if (status >= 500 or status == 408) and method in _IDEMPOTENT and not last:
                failures += 1
                self._sleep(self._backoff(failures))
                continue
            raise ApiError(status, method, shown, message)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def pages(
        self, path: str, params: Mapping[str, Any] | None = None, *, max_pages: int = 10
    ) -> tuple[list[Any], bool]:
        """Items of a paginated list (Link: rel="next", as both trackers send it), and whether
        there were more pages than `max_pages`."""
        items: list[Any] = []
        url: str | None = path
        first = True
        for _ in range(max_pages):
            if url is None:
                return items, False
            resp = self.request("GET", url, params=params if first else None)
            first = False
            if not isinstance(resp.data, list):
                path_shown = urllib.parse.urlsplit(self._url(url, None)).path
                raise ApiError(resp.status, "GET", path_shown, "expected a JSON list")
            items.extend(resp.data)
            url = resp.next_url
        return items, url is not None

    # ------------------------------------------------------------------ internals

    def _url(self, path: str, params: Mapping[str, Any] | None) -> str:
        if path.startswith(("http://", "https://")):
            parts = urllib.parse.urlsplit(path)
            if (parts.scheme, parts.netloc) != self._origin:
                raise ValueError("refusing to send the API token to another origin")
            url = path
        else:
            url = self.base_url + "/" + path.lstrip("/")
        if params:
            sep = "&" if "?" in url else "?"
            url += sep + urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        return url

    def _once(
        self, method: str, url: str, data: bytes | None, headers: Mapping[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(url, data=data, headers=dict(headers), method=method)
        try:
            with self._opener.open(req, timeout=self._timeout) as resp:
                return resp.status, _lower(resp.headers), _read(resp)
        except urllib.error.HTTPError as exc:
            try:
                raw = _read(exc)
            except (OSError, http.client.HTTPException):
                raw = b""
            return exc.code, _lower(exc.headers), raw
        except urllib.error.URLError as exc:
            raise _NoAnswer(f"no answer: {exc.reason}") from None
        except TimeoutError:
            raise _NoAnswer(f"no answer within {self._timeout:.0f} s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise _NoAnswer(f"connection failed: {type(exc).__name__}") from None

    def _limit_wait(self, status: int, headers: Mapping[str, str], message: str) -> float | None:
        """Seconds to wait when the answer is a rate limit; None when it is not one."""
        if status not in (403, 429):
            return None
        after = _retry_after(headers.get("retry-after"), self._clock())
        if after is not None:
            return after
        remaining = headers.get("x-ratelimit-remaining", headers.get("ratelimit-remaining"))
        reset = headers.get("x-ratelimit-reset", headers.get("ratelimit-reset"))
        if remaining is not None and remaining.strip() == "0" and reset is not None:
            try:
                return max(0.0, float(reset) - self._clock()) + 1.0
            except ValueError:
                pass
        if status == 429 or "rate limit" in message.lower():
            return self._retry.default_limit_wait
        return None  # a plain 403: no permission, which waiting does not fix

    def _backoff(self, failures: int) -> float:
        delay = min(self._retry.max_delay, self._retry.base_delay * 2 ** (failures - 1))
        return delay * (0.5 + random.random() / 2)  # jitter: a burst of workers spreads out

    def _next(self, headers: Mapping[str, str]) -> str | None:
        for part in headers.get("link", "").split(","):
            bits = part.split(";")
            if len(bits) < 2 or not any(b.strip() in ('rel="next"', "rel=next") for b in bits[1:]):
                continue
            url = bits[0].strip().strip("<>")
            parts = urllib.parse.urlsplit(url)
            if (parts.scheme, parts.netloc) == self._origin:
                return url
        return None


class TokenUser:
    """Who the API token speaks for: the `field` (`login`, `username`) of `GET /user`, asked
    once and kept. None when no user stands behind the token (an Actions or App token answers
    401, 403 or 404), so the bot cannot tell its own comments by author."""

    def __init__(self, client: RestClient, field: str) -> None:
        self._client = client
        self._field = field
        self._name: tuple[str | None] | None = None
        self._lock = threading.Lock()

    def name(self) -> str | None:
        with self._lock:
            if self._name is None:
                try:
                    data = self._client.request("GET", "/user").data
                    name = data.get(self._field) if isinstance(data, Mapping) else None
                    self._name = (name if isinstance(name, str) else None,)
                except ApiError as exc:
                    if exc.status not in (401, 403, 404):
                        raise
                    self._name = (None,)
            return self._name[0]


class _NoAnswer(Exception):
    pass


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx comes back as an HTTPError, reported as such


def _read(resp: Any) -> bytes:
    raw = resp.read(_MAX_BODY + 1)
    if len(raw) > _MAX_BODY:
        raise http.client.HTTPException("answer too large")
    return raw


def _lower(headers: Any) -> dict[str, str]:
    if headers is None:
        return {}
    return {str(k).lower(): str(v) for k, v in headers.items()}


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _decode(raw: bytes) -> Any:
    text = _text(raw)
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _message(payload: Any) -> str:
    if isinstance(payload, dict):
        for key in ("message", "error", "error_description"):
            value = payload.get(key)
            if isinstance(value, str) and value:
                return value[:300]
            if isinstance(value, (list, dict)) and value:
                return json.dumps(value)[:300]
    if isinstance(payload, str):
        return " ".join(payload.split())[:300]
    return "no message"


def _retry_after(value: str | None, now: float) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date (RFC 9110 allows both)."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now)
