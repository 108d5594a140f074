"""What the MLflow endpoints do, as the token's owner inside the token's team: find and
make experiments, start a run (an ``external`` job), log to it, end it.  ``check_*`` and
:mod:`.mlflow_requests` validate; ``do_*`` act, each in one transaction with its audit
entry, and write nothing when they refuse."""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterable

from django.db import IntegrityError, transaction
from django.utils import timezone

from opdweb.jobs import live
from opdweb.jobs.models import Job
from opdweb.runs import linking, watch
from opdweb.runs import mlflow_errors as errors
from opdweb.runs.metric_map import RESERVED_PREFIX, WATCHED_KEYS
from opdweb.runs.mlflow_requests import LogBatch
from opdweb.runs.mlflow_shapes import STATE_OF_STATUS, STATUS_OF_STATE
from opdweb.runs.models import MlflowExperiment, MlflowRun, RunLink
from opdweb.runs.points import KeyPoints, metrics_of, series_of, write_new_points
from opdweb.teams import audit
from opdweb.teams.access import has_role
from opdweb.teams.models import Role
from opdweb.tokens.models import ApiToken

#: MLflow's client starts runs in experiment "0" when none is set: the team's "Default".
DEFAULT_EXPERIMENT_ID = "0"
DEFAULT_EXPERIMENT_NAME = "Default"
RUN_NAME_TAG = "mlflow.runName"
USER_TAG = "mlflow.user"
#: A run's params and tags live in its job's config: bounded, as every config is.
RUN_CONFIG_MAX_BYTES = 1024 * 1024


def experiment_by_name(token: ApiToken, name: str) -> MlflowExperiment:
    exp = MlflowExperiment.objects.filter(team=token.team_id, name=name).first()
    if exp is None:
        raise errors.not_found(f"Could not find experiment with name '{name}' in team {token.team.slug}")
    return exp


def experiment_by_id(token: ApiToken, experiment_id: str, *, make_default: bool = False) -> MlflowExperiment:
    """The team's experiment ``experiment_id``; ``"0"`` is the team's "Default", made by the
    first run started in it (``make_default``), not by a read."""
    if experiment_id == DEFAULT_EXPERIMENT_ID:
        if make_default:
            exp, _ = MlflowExperiment.objects.get_or_create(team_id=token.team_id, name=DEFAULT_EXPERIMENT_NAME,
                                                            defaults={"created_by": token.user})
            return exp
        exp = MlflowExperiment.objects.filter(team=token.team_id, name=DEFAULT_EXPERIMENT_NAME).first()
    else:
        exp = (MlflowExperiment.objects.filter(team=token.team_id, pk=int(experiment_id)).first()
               if experiment_id.isascii() and experiment_id.isdigit() and len(experiment_id) < 19 else None)
    if exp is None:
        raise errors.not_found(f"No experiment with id {experiment_id!r} in team {token.team.slug}")
    return exp


def do_create_experiment(token: ApiToken, name: str, tags: list[tuple[str, str]]) -> MlflowExperiment:
    try:
        with transaction.atomic():
            return MlflowExperiment.objects.create(team_id=token.team_id, name=name, tags=dict(tags),
                                                   created_by=token.user)
    except IntegrityError:
        raise errors.MlflowRefused(f"Experiment '{name}' already exists in team {token.team.slug}",
                                   errors.RESOURCE_ALREADY_EXISTS) from None


def run_for(token: ApiToken, run_id: str, *, lock: bool = False) -> MlflowRun:
    """The run, if it is in the token's team; a run of another team the owner is in is
    refused with a 403 saying so, any other unknown run is a 404.  ``lock`` holds the
    job's row until the transaction ends (a batch and an end of run do not interleave)."""
    runs = MlflowRun.objects.select_related("job", "job__team", "experiment")
    if lock:
        runs = runs.select_for_update(of=("self", "job"))
    run = runs.filter(run_id=run_id).first()
    if run is None:
        raise errors.not_found(f"Run with id={run_id} not found")
    if run.job.team_id != token.team_id:
        if has_role(token.user, run.job.team_id, Role.VIEWER):
            raise errors.MlflowRefused(f"API token {token.name!r} is for team {token.team.slug}; run {run_id} is "
                                       f"in team {run.job.team.slug}", "PERMISSION_DENIED", 403)
        raise errors.not_found(f"Run with id={run_id} not found")
    return run


def do_start_run(token: ApiToken, *, experiment_id: str, user_id: str, start_time: int | None,
                 tags: list[tuple[str, str]], run_name: str) -> MlflowRun:
    """A new run: an ``external`` job of the token's team, running, with the run's tags
    (its params come with its batches)."""
    tag_map = dict(tags)
    with transaction.atomic():
        exp = experiment_by_id(token, experiment_id, make_default=True)
        return start_run_in(token, exp, run_name=run_name or tag_map.get(RUN_NAME_TAG, ""),
                            user_id=user_id or tag_map.get(USER_TAG, ""), tags=tag_map, start_time=start_time)


def start_run_in(token: ApiToken, exp: MlflowExperiment, *, run_name: str, user_id: str, tags: dict[str, str],
                 start_time: int | None = None, extra_config: dict | None = None) -> MlflowRun:
    """A new run in ``exp`` (inside the caller's transaction), linked if its tags name an
    approval; ``extra_config`` is kept in its job's config beside MLflow's."""
    run_id = uuid.uuid4().hex
    name = run_name or f"run {run_id[:8]}"
    tag_map = {**tags}
    tag_map.setdefault(RUN_NAME_TAG, name)
    config = {"mlflow": {"experiment_id": str(exp.pk), "experiment": exp.name, "run_id": run_id},
              "params": {}, "tags": tag_map, **(extra_config or {})}
    job = Job.open_external(team=token.team, user=token.user, name=name, config=config)
    run = MlflowRun.objects.create(job=job, experiment=exp, run_id=run_id, user_id=user_id,
                                   start_time=start_time if start_time is not None else _now_ms(), token=token)
    audit.record(token.team, token.user, audit.RUN_STARTED,
                 f"started external run #{job.pk} ({name}) in experiment {exp.name!r} with token {token.name!r}",
                 subject="job", subject_id=job.pk, kind=job.kind, run_id=run_id)
    linking.do_link(job, tag_map)
    transaction.on_commit(lambda: live.publish_state(job))
    return run


def do_log_batch(token: ApiToken, run_id: str, batch: LogBatch) -> int:
    """Params, tags and metrics of one batch, all or nothing; returns the points written.
    A param keeps its first value (MLflow's rule: changing one is refused); a tag takes
    the last; each point is written once (:mod:`.points`)."""
    with transaction.atomic():
        job = _open_run(token, run_id)
        _refuse_reserved(m.key for m in batch.metrics)
        config = job.config
        params, tags = dict(config.get("params", {})), dict(config.get("tags", {}))
        for key, value in batch.params:
            if params.setdefault(key, value) != value:
                raise errors.invalid(f"Changing param values is not allowed. Param with key='{key}' was already "
                                     f"logged with value='{params[key]}' for run ID='{run_id}'. Attempted logging "
                                     f"new value '{value}'. Nothing was written.")
        tags.update(batch.tags)
        fields = []
        if params != config.get("params") or tags != config.get("tags"):
            job.config = {**config, "params": params, "tags": tags}
            if len(json.dumps(job.config)) > RUN_CONFIG_MAX_BYTES:
                raise errors.invalid(f"a run's params and tags hold at most {RUN_CONFIG_MAX_BYTES:,} bytes of JSON in "
                                     "all; nothing was written")
            fields.append("config")
        if tags.get(RUN_NAME_TAG) and tags[RUN_NAME_TAG][:200] != job.name:
            job.name = tags[RUN_NAME_TAG][:200]
            fields.append("name")
        if fields:
            job.save(update_fields=fields)
        link = linking.do_link(job, tags) if linking.names_a_link(dict(batch.tags)) else job_link(job)
        return _write_points(job, link, series_of(batch.metrics))


def do_log_points(token: ApiToken, run_id: str, series: list[KeyPoints]) -> int:
    """Points held per key (``POST /api/runs/<run_id>/points``, the native client's
    batches), all or nothing; returns the points written, each once (:mod:`.points`)."""
    with transaction.atomic():
        job = _open_run(token, run_id)
        _refuse_reserved(points.key for points in series)
        return _write_points(job, job_link(job), series)


def _open_run(token: ApiToken, run_id: str) -> Job:
    """The run's job, its row held until the transaction ends; refused once the run is closed."""
    run = run_for(token, run_id, lock=True)
    job = run.job
    if job.is_terminal:
        raise errors.MlflowRefused(
            f"run {run_id} is closed ({STATUS_OF_STATE[job.state]}, job #{job.pk} {job.state}); "
            "nothing was written", errors.INVALID_STATE)
    return job


def _refuse_reserved(keys: Iterable[str]) -> None:
    reserved = next((key for key in keys if key.startswith(RESERVED_PREFIX)), None)
    if reserved is not None:
        raise errors.invalid(f"metric {reserved[:200]!r}: keys under {RESERVED_PREFIX!r} are the product's own "
                             "(derived from what the run logs); nothing was written")


def write_series(job: Job, series: list[KeyPoints]) -> int:
    """Points of a run whose row the caller holds, each once, its link's multiple derived
    and its watch rules applied; returns the points written."""
    return _write_points(job, job_link(job), series)


def _write_points(job: Job, link: RunLink | None, series: list[KeyPoints]) -> int:
    written = write_new_points(job.pk, series, derive=lambda fresh: linking.derived_series(link, fresh))
    watch.do_observe(job, link, metrics_of(series, WATCHED_KEYS))
    return written


def job_link(job: Job) -> RunLink | None:
    return RunLink.objects.filter(job=job).first()


def do_update_run(token: ApiToken, run_id: str, *, status: str, end_time: int | None, run_name: str) -> MlflowRun:
    """Rename the run (ended or not, as MLflow's server allows), end it, or resume it:
    FINISHED, FAILED and KILLED end the job as succeeded, failed and cancelled; RUNNING on
    an ended run opens its job again (what ``mlflow.start_run(run_id=...)`` sends, and
    MLflow's server does).  Ending it again the same way changes nothing (a retried
    ``end_run``); another end of an ended run is refused (resume it first)."""
    with transaction.atomic():
        run = run_for(token, run_id, lock=True)
        job = run.job
        if run_name and run_name[:200] != job.name:
            job.name = run_name[:200]
            job.config = {**job.config, "tags": {**job.config.get("tags", {}), RUN_NAME_TAG: run_name}}
            job.save(update_fields=["name", "config"])
        target = STATE_OF_STATUS.get(status) if status else None
        if job.is_terminal and status == "RUNNING":
            job.reopen_external()
            run.end_time = None
            run.save(update_fields=["end_time"])
            transaction.on_commit(lambda: live.publish_state(job))
        elif job.is_terminal:
            if status and STATUS_OF_STATE[job.state] != status:
                raise errors.MlflowRefused(f"run {run_id} already ended as {STATUS_OF_STATE[job.state]}; it cannot "
                                           f"become {status}", errors.INVALID_STATE)
        elif target is not None:
            job.finish(target)
            run.end_time = end_time if end_time is not None else _now_ms()
            run.save(update_fields=["end_time"])
            transaction.on_commit(lambda: live.publish_state(job))
    return run


def check_status(status: str) -> str:
    if status and status not in (*STATE_OF_STATUS, "RUNNING", "SCHEDULED"):
        raise errors.invalid(f"unknown run status {status!r}; MLflow's are RUNNING, SCHEDULED, FINISHED, FAILED, "
                             "KILLED")
    return status


def _now_ms() -> int:
    return int(timezone.now().timestamp() * 1000)

