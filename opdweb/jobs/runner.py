"""Runs one job inside a worker (the NetBox JobRunner pattern): claim the row, run the
kind's science entry point with a reporter backed by PostgreSQL and the live channel,
and record how it ended.  The Celery task is a one-line call into :func:`run_job`.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback as tb
from typing import Mapping

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from opdweb.jobs import live
from opdweb.jobs.kinds import get_kind
from opdweb.jobs.models import Job, JobLogEntry, JobState
from opdweb.traces.sink import TraceSink
from workers.science.reporting import Cancelled

log = logging.getLogger(__name__)

PROGRESS_WRITE_SECONDS = 0.5
STOP_POLL_SECONDS = 0.5


class JobReporter:
    """The science's reporter for a job: points go to the trace sink; progress and the
    cancel flag are written and read at most every half second."""

    def __init__(self, job: Job, sink: TraceSink):
        self.job = job
        self.sink = sink
        self._progress_written = 0.0
        self._stop_checked = 0.0
        self._stop = False

    def log(self, step: int, values: Mapping[str, float]) -> None:
        self.sink.add(step, values)

    def progress(self, frac: float, message: str = "") -> None:
        self.job.progress = max(0.0, min(1.0, float(frac)))
        self.job.message = message[:500]
        now = time.monotonic()
        if now - self._progress_written >= PROGRESS_WRITE_SECONDS or frac >= 1.0:
            self._progress_written = now
            Job.objects.filter(pk=self.job.pk).update(
                progress=self.job.progress, message=self.job.message, heartbeat_at=timezone.now()
            )
            live.publish_state(self.job)

    def should_stop(self) -> bool:
        now = time.monotonic()
        if not self._stop and now - self._stop_checked >= STOP_POLL_SECONDS:
            self._stop_checked = now
            self._stop = Job.objects.filter(pk=self.job.pk, cancel_requested=True).exists()
        return self._stop


class JobLogHandler(logging.Handler):
    """Forwards log records emitted while a job runs into its log (buffered)."""

    def __init__(self, job_id: int):
        super().__init__(level=logging.INFO)
        self.job_id = job_id
        self.buffer: list[JobLogEntry] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        entry = JobLogEntry(
            job_id=self.job_id,
            created_at=timezone.now(),
            level=record.levelname,
            message=self.format(record)[:10_000],
        )
        with self._lock:
            self.buffer.append(entry)

    def flush_to_db(self) -> None:
        with self._lock:
            entries, self.buffer = self.buffer, []
        if entries:
            JobLogEntry.objects.bulk_create(entries)


class Heartbeat(threading.Thread):
    """Beats the job's heartbeat every JOB_HEARTBEAT_SECONDS from its own connection and
    flushes the job's log; stops when the job ends."""

    def __init__(self, job_id: int, log_handler: JobLogHandler):
        super().__init__(daemon=True, name=f"heartbeat-{job_id}")
        self.job_id = job_id
        self.log_handler = log_handler
        self.done = threading.Event()

    def run(self) -> None:
        try:
            while not self.done.wait(settings.JOB_HEARTBEAT_SECONDS):
                Job.objects.filter(pk=self.job_id, state=JobState.RUNNING).update(heartbeat_at=timezone.now())
                self.log_handler.flush_to_db()
        except Exception:  # noqa: BLE001 - a failed beat must not kill the job
            log.warning("heartbeat for job %s failed", self.job_id, exc_info=True)
        finally:
            connection.close()


def claim(job_id: int, attempt: int, worker: str) -> Job | None:
    """Move the job from queued to running, unless this delivery is stale (the job was
    cancelled, reaped, or requeued as a later attempt)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.state != JobState.QUEUED or job.attempts != attempt:
            return None
        now = timezone.now()
        job.state = JobState.RUNNING
        job.worker = worker[:200]
        job.started_at = job.started_at or now
        job.heartbeat_at = now
        job.message = f"running on {job.worker}"
        job.save(update_fields=["state", "worker", "started_at", "heartbeat_at", "message"])
    return job


def finish(job: Job, state: JobState, *, result=None, error: str = "", trace: str = "") -> None:
    """Record the end of the job, unless the reaper already took it from this worker."""
    updated = Job.objects.filter(pk=job.pk, state=JobState.RUNNING, attempts=job.attempts).update(
        state=state,
        result=result,
        error=error[:10_000],
        traceback=trace,
        finished_at=timezone.now(),
        progress=1.0 if state == JobState.SUCCEEDED else job.progress,
        message={"succeeded": "done", "cancelled": "cancelled", "failed": "failed"}[state],
    )
    if updated:
        job.refresh_from_db()
        live.publish_state(job)


def run_job(job_id: int, attempt: int, worker: str | None = None) -> str | None:
    """Run attempt ``attempt`` of job ``job_id``; returns the final state, or None if this
    delivery was stale and nothing ran."""
    close_old_connections()
    job = claim(job_id, attempt, worker or f"{socket.gethostname()}:{os.getpid()}")
    if job is None:
        log.info("job %s attempt %s: stale delivery, skipped", job_id, attempt)
        return None
    live.publish_state(job)
    kind = get_kind(job.kind)
    handler = JobLogHandler(job.pk)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    heartbeat = Heartbeat(job.pk, handler)
    heartbeat.start()
    sink = TraceSink(job.pk, publish=lambda messages: live.publish(job.pk, messages))
    reporter = JobReporter(job, sink)
    try:
        config = kind.config_model.model_validate(job.config)
        log.info("job %s (%s) attempt %s started on %s", job.pk, job.kind, attempt, job.worker)
        result = kind.run(config, reporter)
        sink.close()
        log.info("job %s succeeded", job.pk)
        state, outcome = JobState.SUCCEEDED, {"result": result}
    except Cancelled as exc:
        sink.close()
        log.info("job %s cancelled: %s", job.pk, exc)
        state, outcome = JobState.CANCELLED, {}
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded on the job
        try:
            sink.close()
        except Exception:  # noqa: BLE001
            log.warning("could not flush the trace of failed job %s", job.pk, exc_info=True)
        log.error("job %s failed: %s", job.pk, exc)
        state, outcome = JobState.FAILED, {"error": f"{type(exc).__name__}: {exc}", "trace": tb.format_exc()}
        if not isinstance(exc, Exception):
            raise
    finally:
        heartbeat.done.set()
        heartbeat.join(timeout=5)
        root.removeHandler(handler)
        handler.flush_to_db()
    finish(job, state, **outcome)
    return state
