"""``/healthz`` for load balancers and the status page for people."""
from __future__ import annotations

from collections import Counter
from datetime import timedelta

import redis
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import render
from django.utils import timezone

from opdweb.health.models import WorkerPresence
from opdweb.jobs.broker import queue_keys
from opdweb.jobs.models import Job, JobState
from opdweb.jobs.scheduling import kinds_on, next_up
from opdweb.teams.access import teams_of
from workers.science.checkpoints import s3
from workers.science.checkpoints.uri import is_remote, parse

QUEUES = ("gpu", "cpu")


def _redis():
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def check_database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return None
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return f"{type(exc).__name__}: {exc}"


def check_redis() -> str | None:
    try:
        _redis().ping()
        return None
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"


def uses_object_store() -> bool:
    """Whether this installation keeps anything in an S3 store (artifacts, or checkpoints
    a config may name there)."""
    return is_remote(str(settings.OPDWEB_ARTIFACT_ROOT)) or bool(settings.OPDWEB_CHECKPOINT_URIS)


def check_object_store() -> str | None:
    """None when the S3 store answers (or none is used); else why not, in a line."""
    if not uses_object_store():
        return None
    root = str(settings.OPDWEB_ARTIFACT_ROOT)
    try:
        s3.ping(parse(root).bucket if is_remote(root) else None)
        return None
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return f"{type(exc).__name__}: {exc}"


def live_workers():
    cutoff = timezone.now() - timedelta(seconds=settings.WORKER_SEEN_SECONDS)
    return WorkerPresence.objects.filter(last_seen__gte=cutoff, stopped=False)


def queue_depths() -> dict[str, int | None]:
    try:
        client = _redis()
        return {q: sum(int(client.llen(key)) for key in queue_keys([q])) for q in QUEUES}
    except Exception:  # noqa: BLE001
        return {q: None for q in QUEUES}


def healthz(request):
    """200 ``ok`` when the database, Redis and the object store (where one is used) answer
    and a worker was seen recently, else
    503 ``degraded``.  Anyone may ask (load balancers do); only staff see the details,
    since worker names and raw errors (hosts, ports) map the deployment for an attacker."""
    db_error = check_database()
    redis_error = check_redis()
    store_error = check_object_store()
    workers = [w.name for w in live_workers()] if db_error is None else []
    ok = db_error is None and redis_error is None and store_error is None and bool(workers)
    body: dict = {"status": "ok" if ok else "degraded"}
    if db_error is None and request.user.is_staff:  # who is asking is in the database too
        body.update({"database": "ok", "redis": redis_error or "ok", "workers": workers,
                     "object_store": (store_error or "ok") if uses_object_store() else "none"})
    return JsonResponse(body, status=200 if ok else 503)


def _shown(error: str | None, user) -> str:
    """A check's outcome for the status page: the raw error for staff only."""
    if error is None:
        return "ok"
    return error if user.is_staff else "unavailable"


def queue_lines(user) -> list[dict]:
    """Per job queue, what runs now and what a free worker takes next (jobs.scheduling):
    a job of the person's teams by name and owner, another team's only as a count, since
    the queue is shared and the job is theirs."""
    mine = set(teams_of(user).values_list("pk", flat=True))

    def split(jobs) -> tuple[list[Job], int]:
        shown = [job for job in jobs if user.is_staff or job.team_id in mine]
        return shown, len(jobs) - len(shown)

    lines = []
    for queue in QUEUES:
        running, running_others = split(list(Job.objects.filter(state=JobState.RUNNING, kind__in=kinds_on(queue))
                                             .select_related("created_by", "team").order_by("started_at")))
        upcoming, upcoming_others = split(next_up(queue, 20))
        lines.append({"queue": queue, "running": running, "running_others": running_others, "next": upcoming,
                      "next_others": upcoming_others})
    return lines


@login_required
def status_page(request):
    cutoff = timezone.now() - timedelta(seconds=settings.WORKER_SEEN_SECONDS)
    # Job counts of the teams the person belongs to; staff see every team's.
    jobs = Job.objects.all() if request.user.is_staff else Job.objects.filter(team__in=teams_of(request.user))
    # Workers and queues serve every team: their names, hosts and depths are for staff;
    # everyone else sees how many workers are alive on which devices.
    context = {
        "database": _shown(check_database(), request.user),
        "redis": _shown(check_redis(), request.user),
        "object_store": _shown(check_object_store(), request.user) if uses_object_store() else "none used",
        "staff": request.user.is_staff,
        "workers": WorkerPresence.objects.all() if request.user.is_staff else [],
        "alive_devices": sorted(Counter(live_workers().values_list("device", flat=True)).items()),
        "cutoff": cutoff,
        "queues": queue_depths() if request.user.is_staff else {},
        "running": jobs.filter(state=JobState.RUNNING).count(),
        "queued": jobs.filter(state=JobState.QUEUED).count(),
        "waiting": jobs.filter(state=JobState.WAITING).count(),
        "lines": queue_lines(request.user),
    }
    return render(request, "health/status.html", context)
