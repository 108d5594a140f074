"""What the broker holds: each job attempt's Celery message has a known id, so the reaper
can tell a queued job whose message is waiting from one whose message was lost (a Redis
crash, a flush) and send it again."""
from __future__ import annotations

import re

import kombu.exceptions
import redis
from django.conf import settings

#: Sending failed because the broker is unreachable (after Celery's short publish retries).
BROKER_ERRORS = (kombu.exceptions.OperationalError, redis.exceptions.RedisError, OSError)
#: Kombu's Redis transport keeps each priority step but 0 in a key beside the queue's own.
_PRIORITY_SEPARATOR = "\x06\x16"
_TASK_ID = re.compile(rb'job-(\d+)-attempt-(\d+)"')


def task_id(job_id: int, attempt: int) -> str:
    return f"job-{job_id}-attempt-{attempt}"


def queue_keys(queues: list[str]) -> list[str]:
    """The Redis lists holding ``queues``' messages, one per priority step, first taken first."""
    steps = settings.CELERY_BROKER_TRANSPORT_OPTIONS["priority_steps"]
    return [q + (f"{_PRIORITY_SEPARATOR}{step}" if step else "") for q in queues for step in steps]


def waiting_attempts(queues: list[str]) -> set[tuple[int, int]]:
    """``(job_id, attempt)`` of every run_job message waiting in ``queues`` or delivered
    to a worker and not yet acknowledged."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    raw = [m for key in queue_keys(queues) for m in client.lrange(key, 0, -1)]
    raw += client.hvals("unacked")
    return {(int(j), int(a)) for message in raw for j, a in _TASK_ID.findall(message)}
