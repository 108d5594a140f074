"""Runs one job inside a worker (the NetBox JobRunner pattern): claim the row, run the
kind's science entry point with a reporter backed by PostgreSQL and the live channel,
and record how it ended.  The Celery task is a one-line call into :func:`run_job`.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import traceback as tb
from typing import Iterator, Mapping

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone
from pydantic import BaseModel

from opdweb.jobs import live
from opdweb.jobs.actions import enqueue, wake_parent
from opdweb.jobs.checkpoints import checked_out, named_by_uri
from opdweb.jobs.models import TERMINAL_STATES, Job, JobLogEntry, JobState
from opdweb.jobs.scheduling import claim_preemption
from opdweb.jobs.signals import job_succeeded
from opdweb.refusals import Refused
from opdweb.sandbox import confine, product_values
from opdweb.traces.sink import TraceSink
from workers.science.checkpoints.files import StoreUnavailable
from workers.science.children import ChildFailed
from workers.science.entrypoints import get_kind
from workers.science.reporting import Cancelled

log = logging.getLogger(__name__)

PROGRESS_WRITE_SECONDS = 0.5
PREEMPT_POLL_SECONDS = 0.5
STOP_POLL_SECONDS = 0.5


class Parked(BaseException):
    """A parent whose ``pending`` children still run stops here and lets its worker go
    (a BaseException, so science code that catches errors does not catch it)."""

    def __init__(self, pending: list[int], message: str):
        super().__init__(message)
        self.pending = pending


class JobReporter:
    """The science's reporter for a job: points go to the trace sink; progress and the
    cancel flag are written and read at most every half second.  Past ``deadline`` (the
    kind's time limit, monotonic) ``should_stop()`` is true and ``timed_out`` says why."""

    def __init__(self, job: Job, sink: TraceSink, deadline: float = float("inf")):
        self.job = job
        self.sink = sink
        self.deadline = deadline
        self.timed_out = False
        self._progress_written = 0.0
        self._stop_checked = 0.0
        self._stop = False
        self.making_way_for: int | None = None  # an interactive job it stopped for (scheduling)
        kind = get_kind(job.kind)
        self._preempt_queue = kind.queue if kind.preemptible else None  # where it watches for waiting work
        self._preempt_checked = 0.0
        # A job run again (a parent woken by its children, an attempt resumed) shows at
        # least the progress it had: the bar does not go back while it catches up.
        self._floor = job.progress

    def log(self, step: int, values: Mapping[str, float]) -> None:
        self.sink.add(step, values)

    def flush(self) -> None:
        self.sink.flush()

    def progress(self, frac: float, message: str = "") -> None:
        self.job.progress = max(self._floor, min(1.0, float(frac)))
        self.job.message = message[:500]
        now = time.monotonic()
        if now - self._progress_written >= PROGRESS_WRITE_SECONDS or frac >= 1.0:
            self._progress_written = now
            Job.objects.filter(pk=self.job.pk).update(
                progress=self.job.progress, message=self.job.message, heartbeat_at=timezone.now()
            )
            live.publish_state(self.job)

    def run_children(self, children) -> Iterator[tuple[object, BaseModel]]:
        """Each child as a job of its own (several workers share them); yields each that
        succeeded with its typed result (the child kind's result model), in the order given.
        While some still run it raises :class:`Parked`: the parent lets its worker go and
        runs again from the start when a child ends (made once per key, the children it
        made are found again, and the ended ones come back at once).  A failed child fails
        the parent; a parent asked to stop cancels the children still queued or running."""
        from opdweb.jobs.actions import do_cancel_job, do_submit_children

        jobs = do_submit_children(self.job, children)
        pending = {job.pk: child for job, child in zip(jobs, children, strict=True)}
        if self.should_stop():
            for job in Job.objects.filter(pk__in=pending).exclude(state__in=TERMINAL_STATES):
                try:
                    do_cancel_job(job)
                except Refused:
                    pass  # it ended or is already being cancelled
            raise Cancelled(f"stopped with {len(pending)} child job(s) unfinished")
        ended = {job.pk: job for job in Job.objects.filter(pk__in=pending, state__in=TERMINAL_STATES)}
        for pk in [pk for pk in pending if pk in ended]:
            job, child = ended[pk], pending.pop(pk)
            if job.state != JobState.SUCCEEDED:
                raise ChildFailed(f"child job #{job.pk} ({child.label or child.key}) {job.state}: "
                                  f"{job.error or job.message}")
            yield child, get_kind(job.kind).validated(job.result)
        if pending:
            raise Parked(list(pending), f"waiting for {len(pending)} of {len(children)} child job(s)")

    def should_stop(self) -> bool:
        now = time.monotonic()
        if now >= self.deadline:
            self.timed_out = True
            return True
        if not self._stop and now - self._stop_checked >= STOP_POLL_SECONDS:
            self._stop_checked = now
            self._stop = Job.objects.filter(pk=self.job.pk, cancel_requested=True).exists()
        if not self._stop and self._preempt_queue and now - self._preempt_checked >= PREEMPT_POLL_SECONDS:
            self._preempt_checked = now
            self.making_way_for = claim_preemption(self._preempt_queue)
            self._stop = self.making_way_for is not None
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
        """Write the buffered lines, then send them to the job's live page."""
        with self._lock:
            entries, self.buffer = self.buffer, []
        if entries:
            live.publish_log(self.job_id, JobLogEntry.objects.bulk_create(entries))


class Heartbeat(threading.Thread):
    """Beats the job's heartbeat every JOB_HEARTBEAT_SECONDS from its own connection and
    flushes the job's log every JOB_LOG_FLUSH_SECONDS; stops when the job ends.

    It is also the time limit's watchdog: a job still running ``JOB_TIME_LIMIT_GRACE_S``
    after its limit did not stop when asked (science that never polls ``should_stop()``),
    so it is recorded as failed and the worker process is killed; the launcher (or the
    container runtime) starts a fresh one, and the job's message, redelivered later, is a
    stale delivery that nothing runs."""

    def __init__(self, job: Job, log_handler: JobLogHandler, hard_deadline: float, limit_s: float):
        super().__init__(daemon=True, name=f"heartbeat-{job.pk}")
        self.job = job
        self.log_handler = log_handler
        self.hard_deadline = hard_deadline
        self.limit_s = limit_s
        self.done = threading.Event()

    def run(self) -> None:
        try:
            next_beat = time.monotonic() + settings.JOB_HEARTBEAT_SECONDS
            while not self.done.wait(min(settings.JOB_LOG_FLUSH_SECONDS, settings.JOB_HEARTBEAT_SECONDS)):
                now = time.monotonic()
                if now >= self.hard_deadline:
                    self.kill_overrunning_job()
                if now >= next_beat:
                    Job.objects.filter(pk=self.job.pk, state=JobState.RUNNING).update(heartbeat_at=timezone.now())
                    next_beat = now + settings.JOB_HEARTBEAT_SECONDS
                self.log_handler.flush_to_db()
        except Exception:  # noqa: BLE001 - a failed beat must not kill the job
            log.warning("heartbeat for job %s failed", self.job.pk, exc_info=True)
        finally:
            connection.close()

    def kill_overrunning_job(self) -> None:
        grace = settings.JOB_TIME_LIMIT_GRACE_S
        log.error("job %s ran %.0f s past its time limit of %.0f s without stopping; killing worker %s",
                  self.job.pk, grace, self.limit_s, os.getpid())
        self.log_handler.flush_to_db()
        if self.job.finish(JobState.FAILED, error=f"time limit: did not stop within {grace:.0f} s of its limit of "
                           f"{self.limit_s:.0f} s, so its worker was killed and restarted"):
            live.publish_state(self.job)
        os.kill(os.getpid(), signal.SIGKILL)


def time_limit_s(kind) -> float:
    """The kind's time limit, capped by ``JOB_TIME_LIMIT_MAX_S`` where the operator set one."""
    cap = settings.JOB_TIME_LIMIT_MAX_S
    return float(kind.time_limit_s if cap is None else min(kind.time_limit_s, cap))


def run_job(job_id: int, attempt: int, worker: str | None = None) -> str | None:
    """Run attempt ``attempt`` of job ``job_id``; returns the final state, or None if this
    delivery was stale and nothing ran."""
    close_old_connections()
    job = Job.claim(job_id, attempt, worker or f"{socket.gethostname()}:{os.getpid()}")
    if job is None:
        log.info("job %s attempt %s: stale delivery, skipped", job_id, attempt)
        return None
    live.publish_state(job)
    kind = get_kind(job.kind)
    handler = JobLogHandler(job.pk)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    limit_s = time_limit_s(kind)
    # A parent's limit counts from its first start, however often it let its worker go.
    spent = (timezone.now() - job.started_at).total_seconds() if job.children.exists() else 0.0
    deadline = time.monotonic() + limit_s - spent
    heartbeat = Heartbeat(job, handler, deadline + settings.JOB_TIME_LIMIT_GRACE_S, limit_s)
    heartbeat.start()
    sink = TraceSink(job.pk, publish=lambda messages: live.publish(job.pk, messages))
    reporter = JobReporter(job, sink, deadline)
    parked: Parked | None = None
    try:
        confined = confine(kind.config, job.config, product=product_values(job))
        with checked_out(kind.config, confined, reporter) as (local, names):
            config = kind.config.model_validate(local)
            log.info("job %s (%s) attempt %s started on %s", job.pk, job.kind, attempt, job.worker)
            result = kind.run(config, reporter)
        sink.close()
        log.info("job %s succeeded", job.pk)
        state, outcome = JobState.SUCCEEDED, {"result": named_by_uri(result.model_dump(mode="json"), names)}
    except Parked as exc:
        sink.close()
        log.info("job %s: %s; its worker is free until one of them ends", job.pk, exc)
        parked, state, outcome = exc, None, {}
    except StoreUnavailable as exc:
        sink.close()
        if job.attempts < settings.JOB_FETCH_ATTEMPTS:
            log.warning("job %s: %s; trying again in %.0f s", job.pk, exc,
                        settings.JOB_FETCH_RETRY_SECONDS * job.attempts)
            state, outcome = None, {"retry": f"waiting for the store: {exc}"}
        else:
            log.error("job %s failed: %s", job.pk, exc)
            state, outcome = JobState.FAILED, {"error": f"the store stayed out of reach over {job.attempts} "
                                                        f"attempts: {exc}"}
    except Cancelled as exc:
        sink.close()
        if reporter.timed_out:
            log.error("job %s stopped at its time limit of %.0f s", job.pk, limit_s)
            state, outcome = JobState.FAILED, {"error": f"time limit: stopped at its limit of {limit_s:.0f} s"}
        elif reporter.making_way_for is not None:
            log.info("job %s made way for interactive job #%s: %s; it resumes from there", job.pk,
                     reporter.making_way_for, exc)
            state, outcome = None, {"retry": f"made way for interactive job #{reporter.making_way_for}; "
                                             "queued again to resume where it stopped"}
        else:
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
    if parked is not None:
        if job.park(str(parked), parked.pending) == JobState.QUEUED:  # a child ended as it parked
            enqueue(job.pk, job.attempts)
        live.publish_state(job)
    elif state is None:
        if job.retry_later(outcome["retry"]):
            later = 0.0 if reporter.making_way_for else settings.JOB_FETCH_RETRY_SECONDS * (job.attempts - 1)
            enqueue(job.pk, job.attempts, countdown=later or None)
            live.publish_state(job)
    elif record_outcome(job, state, outcome):
        live.publish_state(job)
        wake_parent(job)
    return job.state


def record_outcome(job: Job, state: JobState, outcome: dict) -> bool:
    """Record how the attempt ended; a success is recorded together with what its receivers
    store (a calibration's budget), and if they cannot store it the job fails saying why."""
    if state != JobState.SUCCEEDED:
        return job.finish(state, **outcome)
    try:
        with transaction.atomic():
            recorded = job.finish(state, **outcome)
            if recorded:
                job_succeeded.send(sender=Job, job=job)
        return recorded
    except Exception as exc:  # noqa: BLE001 - the job fails with the reason instead
        log.exception("job %s: its result could not be stored", job.pk)
        job.refresh_from_db()
        return job.finish(JobState.FAILED, error=f"the result could not be stored: {type(exc).__name__}: {exc}",
                          trace=tb.format_exc())
