from django.db import models


class WorkerPresence(models.Model):
    """A Celery worker as it last reported itself (every few seconds while alive)."""

    name = models.CharField(max_length=200, unique=True)
    hostname = models.CharField(max_length=200)
    pid = models.IntegerField()
    queues = models.JSONField(default=list)
    device = models.CharField(max_length=200, help_text="what the worker computes on, e.g. cuda:0 (NVIDIA H100) or cpu")
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField()
    stopped = models.BooleanField(default=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
