"""Jobs and their traces over the API."""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from django.http import Http404
from django.shortcuts import get_object_or_404
from ninja import Field, Query, Router, Schema, Status

from opdweb.jobs.actions import JobRefused, do_cancel_job, do_submit_job
from opdweb.jobs.kinds import KINDS
from opdweb.jobs.models import Job
from opdweb.teams.access import has_role, teams_of
from opdweb.teams.models import Role
from opdweb.traces.models import TraceSeries
from opdweb.traces.queries import downsample
from opdweb.traces.export import export_response

router = Router(tags=["jobs"])


class JobIn(Schema):
    kind: str = Field(..., max_length=40)
    config: dict[str, Any] = Field(default_factory=dict)
    name: str = Field("", max_length=200)
    team: str | None = Field(None, description="team slug; defaults to your only team")


class JobOut(Schema):
    id: int
    team: str
    kind: str
    name: str
    config: dict[str, Any]
    state: str
    progress: float
    message: str
    cancel_requested: bool
    attempts: int
    max_attempts: int
    worker: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    error: str
    result: Any

    @staticmethod
    def resolve_team(job: Job) -> str:
        return job.team.slug


class KindOut(Schema):
    name: str
    description: str
    queue: str
    time_limit_s: int
    resumable: bool
    config_schema: dict[str, Any]


class SeriesOut(Schema):
    key: str
    first_step: int
    last_step: int


class DownsampledOut(Schema):
    key: str
    level: int
    bucket_steps: int
    buckets: list[list[float]] = Field(..., description="[start, end, min, max, last_step, last] per bucket")


class LogEntryOut(Schema):
    created_at: datetime
    level: str
    message: str


class Problem(Schema):
    detail: str
    errors: list[dict] = []


def visible_job(request, job_id: int, min_role: Role = Role.VIEWER) -> Job:
    """The job, if the user's team role allows; 404 otherwise (never reveal other teams' jobs)."""
    job = Job.objects.select_related("team").filter(pk=job_id).first()
    if job is None or not has_role(request.user, job.team_id, Role.VIEWER):
        raise Http404(f"job #{job_id} not found")
    if not has_role(request.user, job.team_id, min_role):
        raise JobRefused(f"your role in team {job.team.slug} cannot do this (needs {min_role.label})", status=403)
    return job


@router.get("/kinds", response=list[KindOut])
def list_kinds(request):
    return [
        KindOut(
            name=k.name,
            description=k.description,
            queue=k.queue,
            time_limit_s=k.time_limit_s,
            resumable=k.resumable,
            config_schema=k.config_model.model_json_schema(),
        )
        for k in KINDS.values()
    ]


@router.get("/jobs", response=list[JobOut])
def list_jobs(
    request,
    kind: str | None = None,
    state: str | None = None,
    limit: int = Query(100, ge=1, le=1000),
):
    jobs = Job.objects.filter(team__in=teams_of(request.user)).select_related("team")
    if kind:
        jobs = jobs.filter(kind=kind)
    if state:
        jobs = jobs.filter(state=state)
    return jobs[:limit]


@router.post("/jobs", response={201: JobOut, 400: Problem, 403: Problem, 413: Problem})
def submit_job(request, payload: JobIn):
    teams = teams_of(request.user, Role.MEMBER)
    if payload.team:
        team = teams.filter(slug=payload.team).first()
        if team is None:
            raise JobRefused(f"you cannot submit jobs to team {payload.team!r}", status=403)
    else:
        candidates = list(teams[:2])
        if len(candidates) != 1:
            raise JobRefused("name a team: you may submit to " + (", ".join(t.slug for t in teams) or "no team"), status=400 if candidates else 403)
        team = candidates[0]
    job = do_submit_job(team=team, user=request.user, kind_name=payload.kind, config=payload.config, name=payload.name)
    return Status(201, job)


@router.get("/jobs/{job_id}", response=JobOut)
def get_job(request, job_id: int):
    return visible_job(request, job_id)


@router.post("/jobs/{job_id}/cancel", response={200: JobOut, 403: Problem, 404: Problem, 409: Problem})
def cancel_job(request, job_id: int):
    return do_cancel_job(visible_job(request, job_id, Role.MEMBER))


@router.get("/jobs/{job_id}/log", response=list[LogEntryOut])
def job_log(request, job_id: int, after: int = 0, limit: int = Query(500, ge=1, le=5000)):
    job = visible_job(request, job_id)
    return job.log_entries.filter(id__gt=after)[:limit]


@router.get("/jobs/{job_id}/series", response=list[SeriesOut])
def list_series(request, job_id: int):
    return TraceSeries.objects.filter(job=visible_job(request, job_id)).order_by("key")


@router.get("/jobs/{job_id}/series/downsampled", response=DownsampledOut)
def downsampled_series(
    request,
    job_id: int,
    key: str,
    buckets: int = Query(1000, ge=1, le=5000),
    start: int | None = None,
    end: int | None = None,
):
    series = get_object_or_404(TraceSeries, job=visible_job(request, job_id), key=key)
    return downsample(series, buckets, start, end)


@router.get("/jobs/{job_id}/export")
def export_points(request, job_id: int, format: Literal["csv", "jsonl"] = "csv", key: list[str] = Query(None)):
    """Every point of the job (or of the given keys), streamed: CSV or JSON lines."""
    return export_response(visible_job(request, job_id), format, key or None)
