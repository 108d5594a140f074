"""HTTP to the product with urllib: the bearer token on every request, JSON both ways,
each refusal's own message as the error, and retries with exponential backoff for what a
retry can mend (the connection dropped or refused, a timeout, 429 and 5xx answers).

Only requests whose repetition changes nothing are retried after they may have reached
the server: reads, and the writes the server deduplicates (a metric's identity is its run,
key and step, so a resent batch writes nothing new)."""
from __future__ import annotations

import http.client
import json
import random
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

USER_AGENT = "opdweb-client/0.1"
#: Answers a retry can mend: too many writes this minute, and the server or a proxy in
#: front of it failing or restarting.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class OpdwebError(Exception):
    """Anything the client reports to its caller; the command line prints its message."""


class NotLoggedIn(OpdwebError):
    """No server URL or no token: neither given, nor in the environment, nor in the file."""


class ApiError(OpdwebError):
    """The server refused the request; ``status`` is its HTTP status, the message its own."""

    def __init__(self, status: int, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return self.status in RETRY_STATUSES


class Unreachable(OpdwebError):
    """No answer: the connection was refused or dropped, or the answer did not come in time."""


@dataclass
class Backoff:
    """Exponential backoff with jitter: the n-th wait (from 0) is between half and all of
    ``min(cap, base * 2**n)`` seconds, or the server's ``Retry-After`` when it gives one.
    ``attempts`` bounds the tries (None: until it succeeds, for points that must not be lost)."""

    base: float = 0.5
    cap: float = 30.0
    attempts: int | None = 5
    sleep: Callable[[float], Any] = field(default=time.sleep, repr=False)

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), max(self.cap, retry_after))
        ceiling = min(self.cap, self.base * 2 ** min(retry, 60))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


class Transport:
    def __init__(self, url: str, token: str, timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def call(self, method: str, path: str, body: Any = None, query: dict | list | None = None,
             backoff: Backoff | None = None, stop: Callable[[], bool] | None = None,
             mendable: Callable[[OpdwebError], bool] | None = None) -> Any:
        """The JSON answer of one request; with ``backoff``, retried while the failure is
        one a retry can mend (``mendable``, by default: no answer, 429 or 5xx) and ``stop()``
        is false, else raised."""
        retry = 0
        while True:
            try:
                with self.open(method, path, body, query) as response:
                    raw = response.read()
                return json.loads(raw) if raw else None
            except (ApiError, Unreachable) as exc:
                retry_after = exc.retry_after if isinstance(exc, ApiError) else None
                mended = mendable(exc) if mendable is not None else isinstance(exc, Unreachable) or exc.retryable
                if backoff is None or not mended or (backoff.attempts is not None and retry + 1 >= backoff.attempts) \
                        or (stop is not None and stop()):
                    raise
                backoff.sleep(backoff.delay(retry, retry_after))
                retry += 1

    def open(self, method: str, path: str, body: Any = None, query: dict | list | None = None):
        """The open response (a file to read, e.g. a streamed export); raises
        :class:`ApiError` for a refusal and :class:`Unreachable` for no answer."""
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        data = None if body is None else json.dumps(body, allow_nan=False).encode()
        request = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Accept": "application/json", "User-Agent": USER_AGENT,
            **({"Content-Type": "application/json"} if data is not None else {}),
        })
        try:
            return urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            raise refusal(exc) from None
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout, TimeoutError) \
                as exc:
            reason = getattr(exc, "reason", exc)
            raise Unreachable(f"{self.url} did not answer {method} {path}: {reason or type(exc).__name__}") from None


def refusal(exc: urllib.error.HTTPError) -> ApiError:
    """The server's own message: ``detail`` in the JSON API's answers, ``message`` in the
    MLflow endpoints'; the status line when the body is neither (a proxy's page)."""
    try:
        raw = exc.read()
    except (OSError, http.client.HTTPException):
        raw = b""
    message = ""
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if isinstance(answer, dict):
        message = str(answer.get("detail") or answer.get("message") or "")
        problems = answer.get("errors")
        if isinstance(problems, list) and problems:
            message += "".join(f"\n  {p.get('field', '')}: {p.get('message', '')}" for p in problems
                               if isinstance(p, dict))
    retry_after = None
    header = exc.headers.get("Retry-After") if exc.headers else None
    if header:
        try:
            retry_after = float(header)
        except ValueError:
            pass
    return ApiError(exc.code, f"{exc.code} {exc.reason}: {message}" if message else f"{exc.code} {exc.reason}",
                    retry_after)
