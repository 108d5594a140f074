"""Publishing to the live channel: one group per job, carrying only increments.

Publishes go through one event loop per process, on a thread of its own, that lives as
long as the process: the channel layer keeps its Redis connection per loop, so each
publish is one command on an open connection.  (``async_to_sync`` from a plain thread
would make a thread, a loop and a connection for every publish: a worker publishes
every 50 ms while it logs.)
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading

from channels.layers import get_channel_layer

log = logging.getLogger(__name__)
PUBLISH_TIMEOUT_S = 10.0
_loop_lock = threading.Lock()
_loop: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop): a forked child makes its own


def _publishing_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None or _loop[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="live-publish", daemon=True).start()
            _loop = (os.getpid(), loop)
        return _loop[1]


def job_group(job_id: int) -> str:
    return f"job.{job_id}"


def state_payload(job) -> dict:
    return {
        "id": job.pk,
        "state": job.state,
        "progress": job.progress,
        "message": job.message,
        "error": job.error,
        "attempts": job.attempts,
        "cancel_requested": job.cancel_requested,
    }


def publish(job_id: int, messages: list[dict]) -> None:
    """Send messages to the job's group.  A broken channel costs only liveness: the
    database already holds everything, so failures are logged, never raised."""
    if not messages:
        return
    layer = get_channel_layer()
    if layer is None:
        return

    async def send_all():
        for message in messages:
            await layer.group_send(job_group(job_id), message)

    try:
        asyncio.run_coroutine_threadsafe(send_all(), _publishing_loop()).result(PUBLISH_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - liveness only; the database is the truth
        log.warning("live publish for job %s failed", job_id, exc_info=True)


def publish_state(job) -> None:
    publish(job.pk, [{"type": "job.state", "job": state_payload(job)}])


def log_line(entry) -> list:
    """A log entry as the live channel sends it: ``[id, ISO time, level, message]``."""
    return [entry.pk, entry.created_at.isoformat(), entry.level, entry.message]


def publish_log(job_id: int, entries) -> None:
    """Send log entries just written (they carry their ids) to the job's group."""
    publish(job_id, [{"type": "job.log", "entries": [log_line(e) for e in entries]}])


def publish_alert(job_id: int, alert: dict) -> None:
    """An alert just raised on a watched run (:mod:`opdweb.runs.watch`), to its open pages."""
    publish(job_id, [{"type": "run.alert", "alert": alert}])
