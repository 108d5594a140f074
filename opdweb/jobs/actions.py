"""Everything that changes a job's state.  ``check_*`` validates, ``do_*`` changes and
announces.  Views and tasks call these; nothing else writes ``Job.state``.
"""
from __future__ import annotations

import json
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from opdweb.jobs import live
from opdweb.jobs.kinds import JobKind, UnknownJobKind, get_kind
from opdweb.jobs.models import Job, JobState
from opdweb.validation import field_errors, summary


class JobRefused(ValueError):
    """A request about a job that cannot be honoured; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400, details: list | None = None):
        super().__init__(message)
        self.status = status
        self.details = details or []


def check_job_config(kind_name: str, config) -> tuple[JobKind, dict]:
    """Validate ``config`` against the kind's schema; returns the normalised config."""
    try:
        kind = get_kind(kind_name)
    except UnknownJobKind as exc:
        raise JobRefused(str(exc)) from None
    if not isinstance(config, dict):
        raise JobRefused("config must be a JSON object")
    if len(json.dumps(config)) > settings.JOB_CONFIG_MAX_BYTES:
        raise JobRefused(f"config is larger than {settings.JOB_CONFIG_MAX_BYTES} bytes", status=413)
    try:
        model = kind.config_model.model_validate(config)
    except ValidationError as exc:
        details = field_errors(exc, root="(config)")
        raise JobRefused(f"invalid {kind.name} config: {summary(details)}", details=details) from None
    return kind, model.model_dump(mode="json")


def do_submit_job(*, team, user, kind_name: str, config, name: str = "") -> Job:
    kind, normalised = check_job_config(kind_name, config)
    with transaction.atomic():
        job = Job.objects.create(
            team=team,
            created_by=user,
            kind=kind.name,
            name=name[:200],
            config=normalised,
            max_attempts=kind.max_attempts,
        )
        transaction.on_commit(lambda: enqueue(job.pk, job.attempts))
    return job


def enqueue(job_id: int, attempt: int) -> None:
    """Hand the job to Celery.  Called only after the row is committed."""
    from workers.celery_app import app

    job = Job.objects.only("kind").get(pk=job_id)
    kind = get_kind(job.kind)
    app.send_task(
        "opdweb.run_job",
        args=[job_id, attempt],
        queue=kind.queue,
        time_limit=kind.time_limit_s + 60,
        soft_time_limit=kind.time_limit_s,
    )


def do_cancel_job(job: Job) -> Job:
    """Queued jobs are cancelled at once; running ones are asked to stop cooperatively."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.is_terminal:
            raise JobRefused(f"job #{job.pk} already {job.state}", status=409)
        if job.state == JobState.QUEUED:
            job.state = JobState.CANCELLED
            job.finished_at = timezone.now()
            job.message = "cancelled before it started"
            job.save(update_fields=["state", "finished_at", "message"])
        else:
            if job.cancel_requested:
                raise JobRefused(f"job #{job.pk} is already being cancelled", status=409)
            job.cancel_requested = True
            job.message = "cancel requested"
            job.save(update_fields=["cancel_requested", "message"])
    live.publish_state(job)
    return job


def do_reap_stale_jobs(now=None) -> list[tuple[int, str]]:
    """Running jobs whose heartbeat stopped: a job someone asked to cancel is cancelled;
    otherwise it is requeued if its kind can resume and attempts remain, else marked
    failed.  Returns ``[(job_id, new_state)]``."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.JOB_STALE_SECONDS)
    reaped = []
    with transaction.atomic():
        stale = Job.objects.select_for_update(skip_locked=True).filter(state=JobState.RUNNING, heartbeat_at__lt=cutoff)
        for job in stale:
            kind = get_kind(job.kind)
            lost = f"worker {job.worker or '?'} lost: no heartbeat since {job.heartbeat_at:%Y-%m-%d %H:%M:%S}Z"
            if job.cancel_requested:
                job.state = JobState.CANCELLED
                job.message = f"{lost}; it had been asked to cancel"
                job.finished_at = now
                job.save(update_fields=["state", "message", "finished_at"])
            elif kind.resumable and job.attempts < job.max_attempts:
                job.state = JobState.QUEUED
                job.attempts += 1
                job.message = f"{lost}; requeued (attempt {job.attempts} of {job.max_attempts})"
                job.save(update_fields=["state", "attempts", "message"])
                transaction.on_commit(lambda pk=job.pk, a=job.attempts: enqueue(pk, a))
            else:
                job.state = JobState.FAILED
                job.error = lost
                job.finished_at = now
                job.save(update_fields=["state", "error", "finished_at"])
            reaped.append((job.pk, job.state))
    for job_id, _ in reaped:
        live.publish_state(Job.objects.get(pk=job_id))
    return reaped
