"""Jobs over the JSON API (``/api/``, described at ``/api/openapi.json``): submit one,
read its state, wait for its end, export its points."""
from __future__ import annotations

import time
from typing import IO, Any, Callable

from opdweb_client.credentials import Credentials, load_credentials
from opdweb_client.transport import Backoff, OpdwebError, Transport

TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
EXPORT_CHUNK_BYTES = 64 * 1024


class Client:
    """The product at ``credentials.url`` as the token's owner, inside the token's team."""

    def __init__(self, credentials: Credentials | None = None, timeout: float = 30.0):
        self.credentials = credentials or load_credentials()
        self.transport = Transport(self.credentials.url, self.credentials.token, timeout=timeout)
        self.reads = Backoff()  # a read is safe to repeat

    def check(self) -> list[dict]:
        """Raise unless the server takes the token (a read it may make: its team's newest job)."""
        return self.transport.call("GET", "/api/jobs", query={"limit": 1}, backoff=self.reads)

    def kinds(self) -> list[dict]:
        return self.transport.call("GET", "/api/kinds", backoff=self.reads)

    def submit(self, kind: str, config: dict[str, Any] | None = None, name: str = "", team: str | None = None) -> dict:
        """A new job, as the server answers it.  Sent once, never retried: a lost answer
        could otherwise make two jobs."""
        body: dict[str, Any] = {"kind": kind, "config": config or {}, "name": name}
        if team:
            body["team"] = team
        return self.transport.call("POST", "/api/jobs", body=body)

    def job(self, job_id: int) -> dict:
        return self.transport.call("GET", f"/api/jobs/{int(job_id)}", backoff=self.reads)

    def cancel(self, job_id: int) -> dict:
        return self.transport.call("POST", f"/api/jobs/{int(job_id)}/cancel")

    def wait(self, job_id: int, timeout: float | None = None, interval: float = 1.0,
             on_change: Callable[[dict], Any] | None = None) -> dict:
        """Poll the job until it ends (``succeeded``, ``failed`` or ``cancelled``); returns its
        last state.  ``on_change`` is called with the job whenever its state or progress moves."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen = None
        while True:
            job = self.job(job_id)
            now = (job["state"], job.get("progress"), job.get("message"))
            if now != seen and on_change is not None:
                on_change(job)
            seen = now
            if job["state"] in TERMINAL_STATES:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimedOut(f"job #{job_id} is still {job['state']} after {timeout:g} s")
            time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))

    def export(self, job_id: int, out: IO[bytes], fmt: str = "jsonl", keys: list[str] | None = None) -> int:
        """Every point of the job (or of ``keys``) as the server streams it, CSV or JSON
        lines, written to ``out``; returns the bytes written."""
        if fmt not in ("csv", "jsonl"):
            raise OpdwebError(f"export format {fmt!r}: use csv or jsonl")
        query = [("format", fmt)] + [("key", k) for k in keys or ()]
        written = 0
        with self.transport.open("GET", f"/api/jobs/{int(job_id)}/export", query=query) as response:
            while chunk := response.read(EXPORT_CHUNK_BYTES):
                out.write(chunk)
                written += len(chunk)
        return written


class WaitTimedOut(OpdwebError):
    """The job had not ended when ``wait`` gave up."""
