"""Jobs and their traces over the API."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Union

from django.http import Http404, HttpResponse
from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from opdweb.api import Routes
from opdweb.jobs.access import may_see_traceback, visible_job, visible_series
from opdweb.jobs.actions import check_job_config, do_cancel_job, do_submit_job
from opdweb.jobs.estimates import estimate
from opdweb.jobs.models import Job
from opdweb.jobs.summaries import child_rows
from opdweb.refusals import Refused
from opdweb.teams.access import teams_of
from opdweb.teams.models import Role
from opdweb.traces.download import export_response
from opdweb.traces.models import TraceSeries
from opdweb.traces.queries import MAX_BUCKETS, downsample
from workers.science.entrypoints import KINDS

#: Keys one batched read may ask: a page asks for its charts in chunks of this many, so a
#: job with hundreds of keys cannot make one request read them all.
MAX_SERIES_PER_READ = 32

routes = Routes()


class Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class JobIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field(..., max_length=40)
    config: dict[str, Any] = Field(default_factory=dict)
    name: str = Field("", max_length=200)
    team: str | None = Field(None, description="team slug; defaults to your only team")


def job_submission_schema():
    """``JobIn`` as the OpenAPI document tells it: one alternative per registered kind,
    with that kind's config schema.  The request is validated in two steps (the body by
    ``JobIn``, then the config by its kind's schema) so a bad config gets its own errors;
    this union documents what the two steps enforce together."""
    variants = []
    for kind in KINDS.values():
        config_required = any(f.is_required() for f in kind.config.model_fields.values())
        variants.append(create_model(
            f"{kind.name.capitalize()}Submission",
            __config__=ConfigDict(extra="forbid"),
            kind=(Literal[kind.name], ...),
            config=(kind.config, ...) if config_required else (kind.config, Field(default_factory=kind.config)),
            name=(str, Field("", max_length=200)),
            team=(str | None, Field(None, description="team slug; defaults to your only team")),
        ))
    return Annotated[Union[tuple(variants)], Field(discriminator="kind")]


class JobOut(Out):
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
    # A failure's traceback shows code paths and hosts: members and up, and staff.
    traceback: str | None = Field(None, description="a failure's traceback; null for viewers")
    result: Any

    @field_validator("team", mode="before")
    @classmethod
    def _team_slug(cls, team):
        return getattr(team, "slug", team)


class KindOut(Out):
    name: str
    description: str
    queue: str
    time_limit_s: int
    resumable: bool
    config_schema: dict[str, Any]


class SeriesOut(Out):
    key: str
    first_step: int
    last_step: int


class DownsampledOut(BaseModel):
    key: str
    level: int
    bucket_steps: int
    buckets: list[list[float | Literal["NaN", "Infinity", "-Infinity"]]] = Field(
        ..., description="[start, end, min, max, last_step, last] per bucket, then the wall time of last_step (unix s) "
                         "if wall=true; a value that is not finite comes as a string")


class LogEntryOut(Out):
    id: int
    created_at: datetime
    level: str
    message: str


class JobFilter(BaseModel):
    kind: str | None = None
    state: str | None = None
    limit: int = Field(100, ge=1, le=1000)


class LogQuery(BaseModel):
    after: int = Field(0, ge=0, description="only entries with a larger id")
    limit: int = Field(500, ge=1, le=5000)


class DownsampleQuery(BaseModel):
    key: str = Field(..., max_length=200)
    buckets: int = Field(1000, ge=1, le=MAX_BUCKETS)
    start: int | None = Field(None, ge=0)
    end: int | None = Field(None, ge=0)
    wall: bool = Field(False, description="also the wall time of each bucket's last step (for time axes)")


class SeriesBatchQuery(BaseModel):
    key: list[Annotated[str, Field(max_length=200)]] = Field(
        ..., min_length=1, max_length=MAX_SERIES_PER_READ,
        description=f"the keys (repeatable, at most {MAX_SERIES_PER_READ})")
    buckets: int = Field(1000, ge=1, le=MAX_BUCKETS, description="buckets per series")
    wall: bool = Field(False, description="also the wall time of each bucket's last step (for time axes)")


class SeriesBatchOut(BaseModel):
    series: list[DownsampledOut] = Field(..., description="each key's whole range, in the order asked")


class ExportQuery(BaseModel):
    format: Literal["csv", "jsonl"] = "csv"
    key: list[str] = Field(default_factory=list, description="only these keys (repeatable)")


@routes.route("GET", "kinds", summary="Job kinds and their config schemas", response=list[KindOut])
def list_kinds(request):
    return [
        KindOut(name=k.name, description=k.description, queue=k.queue, time_limit_s=k.time_limit_s,
                resumable=k.resumable, config_schema=k.config.model_json_schema())
        for k in KINDS.values()
    ]


@routes.route("GET", "jobs", summary="Jobs of your teams, newest first", query=JobFilter, response=list[JobOut])
def list_jobs(request, query: JobFilter):
    jobs = Job.objects.filter(team__in=teams_of(request.user)).select_related("team")
    if query.kind:
        jobs = jobs.filter(kind=query.kind)
    if query.state:
        jobs = jobs.filter(state=query.state)
    jobs = list(jobs[: query.limit])
    if not request.user.is_staff:
        member_of = set(teams_of(request.user, Role.MEMBER).values_list("pk", flat=True))
        for job in jobs:
            if job.team_id not in member_of:
                job.traceback = None
    return jobs


def submitting_team(user, slug: str | None):
    """The team ``user`` submits to: the one named, else their only one."""
    teams = teams_of(user, Role.MEMBER)
    if slug:
        team = teams.filter(slug=slug).first()
        if team is None:
            raise Refused(f"you cannot submit jobs to team {slug!r}", status=403)
        return team
    candidates = list(teams[:2])
    if len(candidates) != 1:
        names = ", ".join(t.slug for t in teams) or "no team"
        raise Refused(f"name a team: you may submit to {names}", status=400 if candidates else 403)
    return candidates[0]


@routes.route("POST", "jobs", summary="Submit a job", body=JobIn, body_schema=job_submission_schema, response=JobOut,
              status=201, errors=(400, 403, 413, 503))  # 503: the broker is unreachable
def submit_job(request, body: JobIn):
    team = submitting_team(request.user, body.team)
    return do_submit_job(team=team, user=request.user, kind_name=body.kind, config=body.config, name=body.name)


class EstimateOut(BaseModel):
    seconds: float | None = Field(..., description="how long the job would run once a worker takes it; null: "
                                                   "nothing to go by yet")
    ceiling: bool = Field(..., description="the figure assumes every answer runs to max_new_tokens")
    words: str = Field(..., description="the figure as the form says it, e.g. `up to 7 minutes`")
    basis: str = Field(..., description="how it was made")
    note: str = Field(..., description="what may make the job run longer; empty when nothing")


@routes.route("POST", "jobs/estimate", summary="How long a job would run, before submitting it", body=JobIn,
              body_schema=job_submission_schema, response=EstimateOut, errors=(400, 403, 413))
def estimate_job(request, body: JobIn):
    team = submitting_team(request.user, body.team)
    kind, config = check_job_config(body.kind, body.config, team)
    found = estimate(team.pk, kind.name, config)
    return EstimateOut(seconds=found.seconds, ceiling=found.ceiling, words=found.words, basis=found.basis,
                       note=found.note)


@routes.route("GET", "jobs/<int:job_id>", summary="One job", response=JobOut, errors=(404,))
def get_job(request, job_id: int):
    job = visible_job(request.user, job_id)
    if not may_see_traceback(request.user, job.viewer_role):
        job.traceback = None
    return job


class ChildOut(BaseModel):
    id: int
    key: str = Field(..., description="unique within the parent (a calibration's `train-10x-s0`)")
    label: str = Field(..., description="what the child does, e.g. `train 10x seed 0`")
    kind: str
    state: str
    progress: float
    summary: str = Field(..., description="its result in a few words (accuracy, multiple); empty until it has one")


@routes.route("GET", "jobs/<int:job_id>/children", summary="A job's child jobs (a calibration's runs), oldest first",
              response=list[ChildOut], errors=(404,))
def job_children(request, job_id: int):
    return child_rows(visible_job(request.user, job_id))


@routes.route("POST", "jobs/<int:job_id>/cancel", summary="Cancel a job", response=JobOut, errors=(403, 404, 409))
def cancel_job(request, job_id: int):
    return do_cancel_job(visible_job(request.user, job_id, Role.MEMBER), user=request.user)


@routes.route("GET", "jobs/<int:job_id>/log", summary="A job's log lines", query=LogQuery, response=list[LogEntryOut],
              errors=(404,))
def job_log(request, job_id: int, query: LogQuery):
    return list(visible_job(request.user, job_id).log_entries.filter(id__gt=query.after)[: query.limit])


@routes.route("GET", "jobs/<int:job_id>/series", summary="A job's trace keys and their step ranges",
              response=list[SeriesOut], errors=(404,))
def list_series(request, job_id: int):
    return list(TraceSeries.objects.filter(job=visible_job(request.user, job_id)).order_by("key"))


@routes.route("GET", "jobs/<int:job_id>/series/downsampled",
              summary="A series as min / max / last buckets over a step window",
           query=DownsampleQuery, response=DownsampledOut, errors=(404,))
def downsampled_series(request, job_id: int, query: DownsampleQuery):
    series = visible_series(request.user, job_id, [query.key]).get(query.key)
    if series is None:
        raise Http404(f"job #{job_id} has no series {query.key!r}")
    # PostgreSQL wrote the buckets as JSON: they go out as they are (DownsampledOut's shape).
    return HttpResponse(downsample(series, query.buckets, query.start, query.end, query.wall).json(),
                        content_type="application/json")


@routes.route("GET", "jobs/<int:job_id>/series/batch", summary="Several series' whole ranges as buckets, in one read",
           query=SeriesBatchQuery, response=SeriesBatchOut, errors=(404,))
def series_batch(request, job_id: int, query: SeriesBatchQuery):
    """What the job page draws first: one access check and one request for many charts, where
    one read per key would pay for each its own request (about 6 ms apiece in the server)."""
    found = visible_series(request.user, job_id, query.key)
    missing = [key for key in query.key if key not in found]
    if missing:
        raise Http404(f"job #{job_id} has no series {', '.join(map(repr, missing[:5]))}")
    keys = dict.fromkeys(query.key)  # each once, in the order asked
    reads = ",".join(downsample(found[key], query.buckets, wall=query.wall).json() for key in keys)
    return HttpResponse(f'{{"series": [{reads}]}}', content_type="application/json")


@routes.route("GET", "jobs/<int:job_id>/export",
              summary="Every point of the job (or of some keys), streamed as CSV or JSON lines",
           query=ExportQuery, errors=(404,), produces=("text/csv", "application/x-ndjson"))
def export_points(request, job_id: int, query: ExportQuery):
    return export_response(visible_job(request.user, job_id), query.format, query.key or None)
