"""One row per job: admission check, sensitivity scan, calibration, training, selftest.

State changes are methods of :class:`Job` (the only code that writes ``state``):
``queued -> running`` by :meth:`Job.claim`, ``running -> succeeded | failed | cancelled``
by :meth:`Job.finish`, ``running -> waiting -> queued`` for a parent whose children still
run (:meth:`park`, :meth:`wake`: it holds no worker meanwhile), and the operator's
transitions :meth:`cancel`, :meth:`request_cancel`, :meth:`requeue` and :meth:`fail`.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from workers.science.kinds import Kind


class JobState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"  # a parent whose child jobs still run; it holds no worker
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
ACTIVE_STATES = frozenset({JobState.QUEUED, JobState.RUNNING, JobState.WAITING})


class Job(models.Model):
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="jobs")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    kind = models.CharField(max_length=40)
    # A child job (one piece of a calibration) names its parent and a key unique within it,
    # so a parent restarted after a worker loss finds the children it already made.
    parent = models.ForeignKey("self", on_delete=models.CASCADE, null=True, blank=True, related_name="children")
    child_key = models.CharField(max_length=100, blank=True)
    name = models.CharField(max_length=200, blank=True)
    config = models.JSONField()

    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.QUEUED)
    progress = models.FloatField(default=0.0)
    message = models.CharField(max_length=500, blank=True)
    cancel_requested = models.BooleanField(default=False)
    attempts = models.PositiveIntegerField(default=1)
    # The broker priority its last message was sent with (0 first ... 9 last; jobs.scheduling).
    priority = models.PositiveSmallIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=1)

    worker = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    error = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    result = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["parent", "child_key"], condition=models.Q(parent__isnull=False),
                                    name="one_child_per_key"),
        ]
        indexes = [
            models.Index(fields=["team", "-created_at"]),
            models.Index(fields=["state", "heartbeat_at"]),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    # -- state changes ------------------------------------------------------------------
    @classmethod
    def open_external(cls, *, team, user, name: str, config: dict) -> Job:
        """The job of a run that trains elsewhere and reports in (kind ``external``):
        running from the start, never queued, with no worker and no heartbeat (the
        reaper leaves it alone); its trainer ends it through :meth:`finish`."""
        now = timezone.now()
        return cls.objects.create(team=team, created_by=user, kind=Kind.EXTERNAL, name=name[:200], config=config,
                                  state=JobState.RUNNING, started_at=now, message="reporting from outside")

    def reopen_external(self) -> None:
        """Running again: an ended run its trainer resumes (MLflow's ``start_run(run_id=...)``
        sets an ended run back to RUNNING, and MLflow's server lets it)."""
        self.state = JobState.RUNNING
        self.finished_at = None
        self.error = ""
        self.cancel_requested = False
        self.message = "reporting from outside (resumed)"
        self.save(update_fields=["state", "finished_at", "error", "cancel_requested", "message"])

    @classmethod
    def claim(cls, job_id: int, attempt: int, worker: str) -> Job | None:
        """Move the job from queued to running on ``worker``, unless this delivery is stale
        (the job was cancelled, reaped, or requeued as a later attempt)."""
        with transaction.atomic():
            job = cls.objects.select_for_update().filter(pk=job_id).first()
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

    def finish(self, state: JobState, *, result=None, error: str = "", trace: str = "") -> bool:
        """Record how this attempt ended, unless the reaper already took the job from its
        worker; returns whether it was recorded."""
        updated = Job.objects.filter(pk=self.pk, state=JobState.RUNNING, attempts=self.attempts).update(
            state=state,
            result=result,
            error=error[:10_000],
            traceback=trace,
            finished_at=timezone.now(),
            progress=1.0 if state == JobState.SUCCEEDED else self.progress,
            message={"succeeded": "done", "cancelled": "cancelled", "failed": "failed"}[state],
        )
        if updated:
            self.refresh_from_db()
        return bool(updated)

    def cancel(self, message: str) -> None:
        """Cancelled now: a queued job, or a lost one that had been asked to cancel."""
        self.state = JobState.CANCELLED
        self.finished_at = timezone.now()
        self.message = message
        self.save(update_fields=["state", "finished_at", "message"])

    def request_cancel(self) -> None:
        """Ask a running job to stop; its reporter's ``should_stop()`` turns true."""
        self.cancel_requested = True
        self.message = "cancel requested"
        self.save(update_fields=["cancel_requested", "message"])

    def requeue(self, message: str) -> None:
        """Queue the job again as its next attempt (a stale delivery of the old one is ignored)."""
        self.state = JobState.QUEUED
        self.attempts += 1
        self.message = message
        self.save(update_fields=["state", "attempts", "message"])

    def retry_later(self, message: str) -> bool:
        """Queue this running attempt again as the next one, which does not count against
        ``max_attempts`` (the job did not fail: what it needs was out of reach), unless the
        reaper took the job meanwhile; returns whether it was queued."""
        updated = Job.objects.filter(pk=self.pk, state=JobState.RUNNING, attempts=self.attempts).update(
            state=JobState.QUEUED, attempts=models.F("attempts") + 1, max_attempts=models.F("max_attempts") + 1,
            message=message[:500])
        if updated:
            self.refresh_from_db()
        return bool(updated)

    def park(self, message: str, pending: list[int]) -> JobState | None:
        """A parent whose children ``pending`` still run lets its worker go: ``waiting``
        until a child ends and :meth:`wake` queues it again.  If one of them ended while it
        looked, it is queued at once instead (a child's wake found it still running).
        Returns the new state, or None when the reaper took the job meanwhile."""
        with transaction.atomic():
            job = Job.objects.select_for_update().filter(pk=self.pk, state=JobState.RUNNING,
                                                         attempts=self.attempts).first()
            if job is None:
                return None
            ended = Job.objects.filter(pk__in=pending, state__in=TERMINAL_STATES).exists()
            job.state = JobState.QUEUED if ended else JobState.WAITING
            job.worker = ""
            job.heartbeat_at = timezone.now()  # when it parked: the reaper wakes it if no child does
            job.message = message[:500]
            job.save(update_fields=["state", "worker", "heartbeat_at", "message"])
        self.refresh_from_db()
        return self.state

    @classmethod
    def wake(cls, job_id: int, message: str) -> Job | None:
        """``waiting -> queued``; the job, or None when it was not waiting."""
        with transaction.atomic():
            job = cls.objects.select_for_update().filter(pk=job_id, state=JobState.WAITING).first()
            if job is None:
                return None
            job.state = JobState.QUEUED
            job.message = message[:500]
            job.save(update_fields=["state", "message"])
        return job

    def fail(self, error: str) -> None:
        self.state = JobState.FAILED
        self.error = error
        self.finished_at = timezone.now()
        self.save(update_fields=["state", "error", "finished_at"])


class ChartLayout(models.Model):
    """A person's layout of the job pages' charts, the same on every job page and in every
    browser: the charts they pinned to the top and the ones they hid (chart names, as the
    page groups series: ``train/loss``, ``mismatch/*_k3``), and the sections they folded."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chart_layout")
    pinned = models.JSONField(default=list, blank=True)
    hidden = models.JSONField(default=list, blank=True)
    folded = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def as_dict(self) -> dict:
        return {"pinned": self.pinned, "hidden": self.hidden, "folded": self.folded}


class JobLogEntry(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="log_entries")
    created_at = models.DateTimeField()
    level = models.CharField(max_length=10)
    message = models.TextField()

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "job log entries"
