"""Publishing to the live channel: one group per job, carrying only increments."""
from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


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
        async_to_sync(send_all)()
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
