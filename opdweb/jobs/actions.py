"""What people and the reaper do to jobs.  ``check_*`` validates, ``do_*`` acts and
announces on the live channel.  The state writes themselves are methods of
:class:`~opdweb.jobs.models.Job`; the worker's side (claim, finish) is in the runner.
"""
from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Callable

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from opdweb.jobs import live
from opdweb.jobs.broker import BROKER_ERRORS, task_id, waiting_attempts
from opdweb.jobs.models import Job, JobLogEntry, JobState
from opdweb.jobs.scheduling import parents_to_recheck, priority_of
from opdweb.refusals import RETRY_AFTER_OUTAGE, Refused
from opdweb.sandbox import confine
from opdweb.teams import audit
from workers.science.entrypoints import JobKind, UnknownJobKind, get_kind
from workers.science.kinds import EXTERNAL_KINDS

log = logging.getLogger(__name__)


#: Per kind, a function ``(team, config) -> config`` that replaces references to stored
#: objects (an admission check's budget id) by what the worker needs; apps register theirs.
CONFIG_RESOLVERS: dict[str, Callable[[object, dict], dict]] = {}


def check_job_config(kind_name: str, config, team=None) -> tuple[JobKind, dict]:
    """Validate ``config`` against the kind's schema and keep its paths inside the sandbox;
    returns the normalised config (paths resolved, references to the team's stored objects
    filled in)."""
    try:
        kind = get_kind(kind_name)
    except UnknownJobKind as exc:
        raise Refused(str(exc)) from None
    if not isinstance(config, dict):
        raise Refused("config must be a JSON object")
    if len(json.dumps(config)) > settings.JOB_CONFIG_MAX_BYTES:
        raise Refused(f"config is larger than {settings.JOB_CONFIG_MAX_BYTES} bytes", status=413)
    if kind.name in CONFIG_RESOLVERS:
        config = CONFIG_RESOLVERS[kind.name](team, config)
    try:
        # Strict, as JSON: the types the OpenAPI document gives (no `false` for an integer).
        model = kind.config.model_validate_json(json.dumps(config), strict=True)
    except ValidationError as exc:
        raise Refused.invalid(exc, f"invalid {kind.name} config", root="(config)", model=kind.config) from None
    return kind, confine(kind.config, model.model_dump(mode="json"))


def do_submit_job(*, team, user, kind_name: str, config, name: str = "") -> Job:
    kind, normalised = check_job_config(kind_name, config, team)
    with transaction.atomic():
        job = Job.objects.create(
            team=team,
            created_by=user,
            kind=kind.name,
            name=name[:200],
            config=normalised,
            max_attempts=kind.max_attempts,
        )
        audit.record(team, user, audit.JOB_SUBMITTED, f"submitted {kind.name} job #{job.pk}"
                     + (f" ({job.name})" if job.name else ""), subject="job", subject_id=job.pk, kind=kind.name)
        transaction.on_commit(lambda: _enqueue_or_withdraw(job))
    return job


def do_submit_children(parent: Job, children) -> list[Job]:
    """The parent's child jobs (``ChildJob``s), each created once per key: a parent restarted
    after a worker loss gets the children it made before.  A child whose message cannot be
    sent now stays queued; the resend of lost messages sends it."""
    jobs = []
    for child in children:
        kind, normalised = check_job_config(child.kind, child.config, parent.team)
        with transaction.atomic():
            job, made = Job.objects.get_or_create(
                parent=parent, child_key=child.key,
                defaults=dict(team=parent.team, created_by=parent.created_by, kind=kind.name,
                              name=f"{parent.name or f'#{parent.pk}'}: {child.label or child.key}"[:200],
                              config=normalised, max_attempts=kind.max_attempts))
        if made:
            try:
                enqueue(job.pk, job.attempts)
            except BROKER_ERRORS:
                log.warning("broker unreachable; child job %s will be resent", job.pk, exc_info=True)
        jobs.append(job)
    return jobs


def _enqueue_or_withdraw(job: Job) -> None:
    """Send the new job's message; if the broker is unreachable, take the row back so
    that nothing is left half-submitted, and refuse with a 503."""
    try:
        enqueue(job.pk, job.attempts)
    except BROKER_ERRORS:
        log.warning("broker unreachable; job %s withdrawn", job.pk, exc_info=True)
        Job.objects.filter(pk=job.pk).delete()
        raise Refused("the job queue is unreachable, so nothing was submitted; try again in a moment",
                      status=503, headers=RETRY_AFTER_OUTAGE) from None


def enqueue(job_id: int, attempt: int, countdown: float | None = None) -> None:
    """Hand the job to Celery (to run no sooner than ``countdown`` seconds from now).  Called
    only after the row is committed."""
    from opdweb.celery_app import app

    job = Job.objects.get(pk=job_id)
    priority = priority_of(job)
    if priority != job.priority:
        Job.objects.filter(pk=job_id).update(priority=priority)
    # The runner enforces the kind's time limit (solo-pool workers ignore Celery's).
    app.send_task("opdweb.run_job", args=[job_id, attempt], queue=get_kind(job.kind).queue,
                  task_id=task_id(job_id, attempt), countdown=countdown, priority=priority)


def wake_parent(child: Job) -> None:
    """A child that ended queues its parent again if the parent was waiting for it."""
    if child.parent_id is not None:
        wake(child.parent_id, f"child job #{child.pk} {child.state}: looking at the children again")


def wake(job_id: int, message: str) -> None:
    """``waiting -> queued`` and its message sent (after the commit; a lost send is sent
    again by the resend of lost messages)."""
    with transaction.atomic():
        job = Job.wake(job_id, message)
        if job is not None:
            entry = JobLogEntry.objects.create(job=job, created_at=timezone.now(), level="INFO",
                                               message=f"woken: {message}")
            transaction.on_commit(lambda: _send_quietly(job))
    if job is not None:
        live.publish_state(job)
        live.publish_log(job.pk, [entry])


def _send_quietly(job: Job) -> None:
    try:
        enqueue(job.pk, job.attempts)
    except BROKER_ERRORS:
        log.warning("broker unreachable; job %s will be resent", job.pk, exc_info=True)


def do_resend_lost_messages(now=None) -> list[int]:
    """Queued jobs older than ``JOB_RESEND_SECONDS`` whose message is neither waiting in
    the broker nor held by a worker lost it (a broker crash or flush): send it again.
    Safe to repeat: a second delivery of the same attempt is a stale one that nothing runs."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.JOB_RESEND_SECONDS)
    queued = list(Job.objects.filter(state=JobState.QUEUED, created_at__lt=cutoff)
                  .values_list("pk", "attempts", "kind"))
    if not queued:
        return []
    waiting = waiting_attempts(sorted({get_kind(kind).queue for _, _, kind in queued}))
    resent = []
    for job_id, attempt, _ in queued:
        if (job_id, attempt) not in waiting:
            log.warning("job %s attempt %s: its message is gone from the broker; sending it again", job_id, attempt)
            enqueue(job_id, attempt)
            resent.append(job_id)
    return resent


def do_cancel_job(job: Job, user=None) -> Job:
    """Queued jobs are cancelled at once; running ones are asked to stop cooperatively.  A
    person's cancellation (``user``) is audited; the product's own (a parent's children) is not."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.is_terminal:
            raise Refused(f"job #{job.pk} already {job.state}", status=409)
        if job.kind in EXTERNAL_KINDS:
            # Nothing here runs it, so nothing could honour a request: the run is closed now
            # and the trainer's later writes are refused.
            job.cancel("closed in opdweb; the trainer's further writes are refused")
        elif job.state == JobState.QUEUED:
            job.cancel("cancelled before it started")
        elif job.cancel_requested:
            raise Refused(f"job #{job.pk} is already being cancelled", status=409)
        else:
            job.request_cancel()
        if user is not None:
            audit.record(job.team, user, audit.JOB_CANCELLED, f"cancelled {job.kind} job #{job.pk}", subject="job",
                         subject_id=job.pk, kind=job.kind)
    live.publish_state(job)
    if job.state == JobState.WAITING:
        # A waiting parent runs again to cancel its children and end.
        wake(job.pk, "cancel requested: cancelling its child jobs")
    elif job.state == JobState.CANCELLED:
        wake_parent(job)
    return job


def do_reap_stale_jobs(now=None) -> list[tuple[int, str]]:
    """Running jobs whose heartbeat stopped: a job someone asked to cancel is cancelled;
    otherwise it is requeued if its kind can resume and attempts remain, else marked
    failed.  Returns ``[(job_id, new_state)]``."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.JOB_STALE_SECONDS)
    reaped = []
    with transaction.atomic():
        # An external run has no worker and no heartbeat: its trainer ends it.
        stale = (Job.objects.select_for_update(skip_locked=True)
                 .filter(state=JobState.RUNNING, heartbeat_at__lt=cutoff).exclude(kind__in=EXTERNAL_KINDS))
        for job in stale:
            kind = get_kind(job.kind)
            lost = f"worker {job.worker or '?'} lost: no heartbeat since {job.heartbeat_at:%Y-%m-%d %H:%M:%S}Z"
            if job.cancel_requested:
                job.cancel(f"{lost}; it had been asked to cancel")
            elif kind.resumable and job.attempts < job.max_attempts:
                job.requeue(f"{lost}; requeued (attempt {job.attempts + 1} of {job.max_attempts})")
                transaction.on_commit(lambda pk=job.pk, a=job.attempts: enqueue(pk, a))
            else:
                job.fail(lost)
            reaped.append((job.pk, job.state))
    for job_id, _ in reaped:
        job = Job.objects.get(pk=job_id)
        live.publish_state(job)
        if job.is_terminal:
            wake_parent(job)
    for parent_id in parents_to_recheck(settings.JOB_PARENT_RECHECK_SECONDS):
        wake(parent_id, "no child woke it for a while: looking at the children again")
    return reaped
