"""A training run logged from one's own code (the W&B habit), for trainers that log to
neither MLflow nor W&B::

    from opdweb_client import Run

    with Run(name="opd fp8-kv", params={"lr": 1e-6}) as run:
        for step in range(steps):
            run.log(step, {"train/loss": loss, "rollout/k3": k3})

The run is an ``external`` job of the token's team, made and fed through the product's
MLflow-compatible endpoints (``runs/create``, ``runs/update``; see docs/tracking.md), its
points through ``POST /api/runs/<run_id>/points``, held per key.  :meth:`Run.log` only
queues: a background thread sends the points in batches of up to ``batch_size`` (50,000;
the server takes 100,000), every ``flush_interval`` seconds or as soon as a batch is full.  A
batch stays queued until the server has answered it; a dropped connection, a timeout, a
429 or a 5xx is retried with exponential backoff, so no point is lost, and none is written
twice: the server keeps one value per (run, key, step), so a batch resent after a lost
answer writes nothing new.  At exit the queue is flushed and the run ended (``FINISHED``,
or ``FAILED`` after an uncaught exception) unless :meth:`finish` was called.
"""
from __future__ import annotations

import atexit
import math
import sys
import threading
import time
from typing import Any, Mapping

from opdweb_client.credentials import Credentials
from opdweb_client.jobs import Client
from opdweb_client.transport import ApiError, Backoff, OpdwebError

MLFLOW = "/mlflow/api/2.0/mlflow/"
#: The server's limits (docs/tracking.md): points per request, params per batch, a
#: metric key's length, the largest step a trace holds.
MAX_BATCH = 100_000
DEFAULT_BATCH = 50_000
MAX_PARAMS_PER_BATCH = 100
MAX_KEY_LENGTH = 200
MAX_STEP = 2**53 - 1
END_STATUSES = ("FINISHED", "FAILED", "KILLED")


def _wire_value(value: float) -> float | str:
    """A double as MLflow's JSON carries it: a non-finite one as a string."""
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def link_tags(approval: int | str | None, checkpoint: str | None) -> dict[str, str]:
    """The tags that link a run to its approved config: ``approval`` an approval's number
    (``12``, ``"#12"``) or the approved config's hash (as the export carries it)."""
    tags = {}
    if approval is not None:
        text = str(approval).strip()
        tags["opdweb.approval" if text.lstrip("#").isdigit() else "opdweb.config_hash"] = text
    if checkpoint:
        tags["opdweb.checkpoint"] = checkpoint
    return tags


class Run:
    """One run: made on construction, fed by :meth:`log`, ended by :meth:`finish` (or at exit).
    ``approval`` and ``checkpoint`` link it to the approved config it trains under (the server
    refuses one that names nothing of the token's team)."""

    def __init__(self, name: str = "", *, experiment: str | None = None, params: Mapping[str, Any] | None = None,
                 tags: Mapping[str, str] | None = None, approval: int | str | None = None,
                 checkpoint: str | None = None, credentials: Credentials | None = None,
                 flush_interval: float = 1.0, batch_size: int = DEFAULT_BATCH, backoff: Backoff | None = None,
                 exit_timeout: float = 300.0, timeout: float = 30.0):
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be 1 to {MAX_BATCH}, the server's limit per batch")
        self.client = Client(credentials, timeout=timeout)
        self._transport = self.client.transport
        self.flush_interval = flush_interval
        self.batch_size = batch_size
        self.exit_timeout = exit_timeout
        # Points must not be lost: retried until the server has them (or the run is abandoned).
        self.backoff = backoff or Backoff(base=0.5, cap=30.0, attempts=None)
        tags = {**(tags or {}), **link_tags(approval, checkpoint)}
        body: dict[str, Any] = {"experiment_id": self._experiment_id(experiment), "start_time": _now_ms(),
                                "tags": [{"key": k, "value": str(v)} for k, v in tags.items()]}
        if name:
            body["run_name"] = name
        # Sent again only where the server said it wrote nothing (429, 503): a second
        # runs/create after a lost answer would start a second run.
        answer = self._transport.call("POST", MLFLOW + "runs/create", body=body, backoff=Backoff(),
                                      mendable=lambda e: isinstance(e, ApiError) and e.status in (429, 503))
        self.id: str = answer["run"]["info"]["run_id"]
        self.name: str = answer["run"]["info"].get("run_name", name)
        items = [{"key": str(k), "value": str(v)} for k, v in (params or {}).items()]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self._send({"run_id": self.id, "params": items[i:i + MAX_PARAMS_PER_BATCH]}, "runs/log-batch")
        # (key, step, value, unix ms): logged, not yet acknowledged by the server, oldest first
        self._pending: list[tuple[str, int, float | str, int]] = []
        self._cond = threading.Condition()
        self._flushing = 0
        self._closing = False
        self._abandoned = False
        self._failure: OpdwebError | None = None
        self._first_pending_at: float | None = None
        self.sent = 0  # points the server has acknowledged
        self._job_id: int | None = None
        self.status: str | None = None  # how the run ended, once it has
        self._thread = threading.Thread(target=self._send_loop, name=f"opdweb-run-{self.id[:8]}", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)

    # -- the caller's side ------------------------------------------------------------------

    def log(self, step: int, values: Mapping[str, float]) -> None:
        """Queue ``values`` at ``step`` (an integer from 0; one value per key and step: the
        first stays).  Returns at once; raises the reason if the run can no longer send."""
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
            raise ValueError(f"step must be an integer from 0 to 2**53 - 1, got {step!r}")
        now = _now_ms()
        points = []
        for key, value in values.items():
            if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH or "\x00" in key:
                raise ValueError(f"a metric key is a string of 1 to {MAX_KEY_LENGTH} characters without NUL; "
                                 f"got {str(key)[:40]!r} ({len(str(key))} characters)")
            if isinstance(value, bool):
                raise ValueError(f"{key!r}: a value is a number, got {value!r}")
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{key!r}: a value is a number, got {value!r}") from None
            points.append((key, step, _wire_value(number), now))
        with self._cond:
            self._raise_failure()
            if self.status is not None or self._closing:
                raise OpdwebError(f"run {self.id} has ended ({self.status or 'ending'}); nothing more can be logged")
            was_empty = not self._pending
            if was_empty:
                self._first_pending_at = time.monotonic()
            self._pending.extend(points)
            if was_empty or len(self._pending) >= self.batch_size:
                self._cond.notify_all()  # the sender learns when its next batch is due

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every point logged so far is on the server; False if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._pending and self._failure is None and self._thread.is_alive():
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(left)
                self._raise_failure()
                return not self._pending
            finally:
                self._flushing -= 1

    def finish(self, status: str = "FINISHED", timeout: float | None = None) -> None:
        """Flush, then end the run (``FINISHED``, ``FAILED`` or ``KILLED``).  With
        ``timeout``, points still unsent after it are given up and named in the error."""
        if status not in END_STATUSES:
            raise ValueError(f"status must be one of {', '.join(END_STATUSES)}")
        if self.status is not None:
            return
        atexit.unregister(self._at_exit)
        sent_all = self.flush(timeout)
        with self._cond:
            self._closing = True
            if not sent_all:
                self._abandoned = True
            self._cond.notify_all()
        self._thread.join(None if sent_all else 5 * self.client.transport.timeout)
        if not sent_all:
            with self._cond:
                unsent = len(self._pending)
            within = f" within {timeout:g} s" if timeout is not None else ""
            raise OpdwebError(f"run {self.id}: {unsent} points were not sent{within}; the run stays open")
        self._send({"run_id": self.id, "status": status, "end_time": _now_ms()}, "runs/update")
        self.status = status

    @property
    def job_id(self) -> int:
        """The run's job in the product (its page is ``/jobs/<id>/``)."""
        if self._job_id is None:
            for job in self._transport.call("GET", "/api/jobs", query={"kind": "external", "limit": 1000},
                                            backoff=self.client.reads):
                if (job.get("config") or {}).get("mlflow", {}).get("run_id") == self.id:
                    self._job_id = int(job["id"])
                    break
            else:
                raise OpdwebError(f"run {self.id} is not among the team's 1,000 newest external jobs")
        return self._job_id

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finish("FINISHED")
        else:
            try:
                self.finish("KILLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED")
            except OpdwebError as failure:  # the caller's exception is the one to see
                print(f"opdweb: {failure}", file=sys.stderr)

    # -- the sending thread -----------------------------------------------------------------

    def _send(self, body: dict, endpoint: str) -> None:
        self._transport.call("POST", MLFLOW + endpoint, body=body, backoff=self.backoff,
                             stop=lambda: self._abandoned)

    def _ready(self) -> bool:
        if not self._pending:
            return self._closing
        due = self._first_pending_at is not None and time.monotonic() - self._first_pending_at >= self.flush_interval
        return len(self._pending) >= self.batch_size or self._closing or self._flushing > 0 or due

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                while not self._ready():
                    wait = None
                    if self._pending and self._first_pending_at is not None:
                        wait = max(0.0, self._first_pending_at + self.flush_interval - time.monotonic())
                    self._cond.wait(wait)
                if not self._pending or self._abandoned:
                    return
                batch = self._pending[:self.batch_size]  # stays queued until the server has it
            try:
                self._transport.call("POST", f"/api/runs/{self.id}/points", body={"series": _series(batch)},
                                     backoff=self.backoff, stop=lambda: self._abandoned)
            except Exception as exc:  # refused for good (revoked token, closed run), abandoned, or a bug
                with self._cond:
                    if not self._abandoned:
                        self._failure = exc if isinstance(exc, OpdwebError) else OpdwebError(repr(exc))
                    self._cond.notify_all()
                return
            with self._cond:
                del self._pending[:len(batch)]
                self.sent += len(batch)
                self._first_pending_at = time.monotonic() if self._pending else None
                self._cond.notify_all()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise OpdwebError(f"run {self.id} stopped sending; {len(self._pending)} points unsent: {self._failure}")

    def _at_exit(self) -> None:
        """The interpreter is exiting without :meth:`finish`: flush and end the run, as it
        went (an uncaught exception leaves ``sys.last_value``)."""
        failed = getattr(sys, "last_value", None) is not None
        try:
            self.finish("FAILED" if failed else "FINISHED", timeout=self.exit_timeout)
        except OpdwebError as exc:
            print(f"opdweb: {exc}", file=sys.stderr)

    # -- the experiment ---------------------------------------------------------------------

    def _experiment_id(self, name: str | None) -> str:
        """``"0"`` (the team's Default) without a name; else the named experiment, made if new."""
        if not name:
            return "0"
        for _ in range(2):
            try:
                return self._transport.call("GET", MLFLOW + "experiments/get-by-name",
                                            query={"experiment_name": name},
                                            backoff=self.client.reads)["experiment"]["experiment_id"]
            except ApiError as exc:
                if exc.status != 404:
                    raise
            try:
                return self._transport.call("POST", MLFLOW + "experiments/create", body={"name": name})[
                    "experiment_id"]
            except ApiError as exc:
                if exc.status != 400 or "already exists" not in str(exc):  # made meanwhile by another run
                    raise
        raise OpdwebError(f"experiment {name!r} could be neither found nor made")


def _series(batch: list[tuple[str, int, float | str, int]]) -> list[dict]:
    """A batch as the points endpoint takes it: one entry per key, parallel lists."""
    by_key: dict[str, dict[str, Any]] = {}
    for key, step, value, timestamp in batch:
        entry = by_key.get(key)
        if entry is None:
            entry = by_key[key] = {"key": key, "steps": [], "values": [], "timestamps": []}
        entry["steps"].append(step)
        entry["values"].append(value)
        entry["timestamps"].append(timestamp)
    return list(by_key.values())


def _now_ms() -> int:
    return int(time.time() * 1000)
