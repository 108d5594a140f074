"""One row per job: admission check, sensitivity scan, calibration, training, selftest."""
from django.conf import settings
from django.db import models


class JobState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class Job(models.Model):
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="jobs")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    kind = models.CharField(max_length=40)
    name = models.CharField(max_length=200, blank=True)
    config = models.JSONField()

    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.QUEUED)
    progress = models.FloatField(default=0.0)
    message = models.CharField(max_length=500, blank=True)
    cancel_requested = models.BooleanField(default=False)
    attempts = models.PositiveIntegerField(default=1)
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
        indexes = [
            models.Index(fields=["team", "-created_at"]),
            models.Index(fields=["state", "heartbeat_at"]),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None:
            return None
        end = self.finished_at
        if end is None:
            from django.utils import timezone

            end = timezone.now()
        return (end - self.started_at).total_seconds()


class JobLogEntry(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="log_entries")
    created_at = models.DateTimeField()
    level = models.CharField(max_length=10)
    message = models.TextField()

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "job log entries"
