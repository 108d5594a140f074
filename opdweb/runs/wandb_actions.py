"""What the W&B endpoints do, as the token's owner inside the token's team.

A W&B run is an MLflow run of the product (an ``external`` job, its project an experiment
of the token's team, its files the run's artifacts) with a :class:`WandbRun` beside it for
what only W&B has: its id in the project, group, tags, notes, config, summary and the line
counts of its file stream.  The entity a client names must be the token's team (its slug)
or the token's owner (the username: W&B's personal entity); the run goes to the team either
way.  Each ``do_*`` runs in one transaction, the job's row held, and writes nothing when it
refuses."""
from __future__ import annotations

import json
import math
import uuid

from django.db import IntegrityError, transaction
from django.utils import timezone

from opdweb.jobs import live
from opdweb.jobs.models import JobState
from opdweb.refusals import Refused
from opdweb.runs import actions, linking
from opdweb.runs.actions import RUN_NAME_TAG
from opdweb.runs.mlflow_requests import MAX_EXPERIMENT_NAME_LENGTH
from opdweb.runs.models import MlflowExperiment, TrainerAlert, WandbRun
from opdweb.runs.wandb_stream import StreamUpdate
from opdweb.teams import audit
from opdweb.tokens.models import ApiToken

#: W&B's project when the client names none.
DEFAULT_PROJECT = "uncategorized"
MAX_NAME_LENGTH = 128
MAX_TAGS = 100
MAX_TAG_LENGTH = 256
MAX_CONFIG_BYTES = actions.RUN_CONFIG_MAX_BYTES
MAX_ALERTS_PER_RUN = 1000


class WandbRefused(Refused):
    """A refusal the client shows as it is (a GraphQL error, or the file stream's 4xx)."""


def check_entity(token: ApiToken, entity: str | None) -> None:
    if entity and entity not in (token.team.slug, token.user.username):
        raise WandbRefused(f"entity {entity!r} is not this API token's: token {token.name!r} writes to team "
                           f"{token.team.slug} (set WANDB_ENTITY={token.team.slug}, or leave it unset)", status=403)


def project(token: ApiToken, name: str | None, entity: str | None) -> MlflowExperiment | None:
    check_entity(token, entity)
    return MlflowExperiment.objects.filter(team=token.team_id, name=name or DEFAULT_PROJECT).first()


def run_in(token: ApiToken, entity: str | None, project_name: str | None, name: str, *,
           lock: bool = False) -> WandbRun | None:
    check_entity(token, entity)
    runs = WandbRun.objects.select_related("run", "run__job", "experiment")
    if lock:
        runs = runs.select_for_update(of=("self", "run__job"))
    return runs.filter(experiment__team=token.team_id, experiment__name=project_name or DEFAULT_PROJECT,
                       name=name).first()


def run_by_storage_id(token: ApiToken, storage_id: str) -> WandbRun | None:
    run_id = storage_id.removeprefix(STORAGE_PREFIX)
    return WandbRun.objects.select_related("run", "run__job").filter(
        run__run_id=run_id, experiment__team=token.team_id).first()


STORAGE_PREFIX = "opdweb-run-"


def storage_id(wb: WandbRun) -> str:
    """The run's id as the client keeps it (W&B's ``Run.id``, which ``stopRun`` names)."""
    return STORAGE_PREFIX + wb.run.run_id


def _text(value, what: str, limit: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit:
        raise WandbRefused(f"{what} must be a string of at most {limit} characters")
    return value


def _json_object(value: str | None, what: str) -> dict | None:
    if value is None:
        return None
    if len(value) > MAX_CONFIG_BYTES:
        raise WandbRefused(f"{what} holds at most {MAX_CONFIG_BYTES:,} bytes of JSON; nothing was written")
    try:
        parsed = json.loads(value)
    except ValueError:
        raise WandbRefused(f"{what} is not JSON") from None
    if not isinstance(parsed, dict):
        raise WandbRefused(f"{what} must be a JSON object")
    return json_safe(parsed)


def json_safe(value):
    """``value`` as PostgreSQL's JSON keeps it: NaN and the infinities (which W&B's JSON
    carries as bare ``NaN`` / ``Infinity``) as the strings W&B's pages show for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {json_safe(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")  # PostgreSQL's JSON keeps no NUL
    return value


#: Where a W&B run may name its approval: the link tags' short names, and the field names of
#: the provenance the JSON / YAML exports carry under ``opdweb`` (a trainer that logs its
#: loaded config to W&B sends them as they are).
_CONFIG_NAMES = {linking.APPROVAL_TAG: ("approval", "approval_id"), linking.CONFIG_HASH_TAG: ("config_hash",),
                 linking.CHECKPOINT_TAG: ("checkpoint",)}


def link_tags(tags: list[str], config: dict) -> dict[str, str]:
    """The link tags (:mod:`.linking`) a W&B run carries: a tag ``opdweb.approval=12`` (or
    ``:``; ``WANDB_TAGS`` sets them for any trainer), a flat config value ``opdweb.approval``,
    or a config ``opdweb`` holding ``approval`` / ``approval_id``, ``config_hash`` and
    ``checkpoint`` (an export's provenance); the same for the hash and the checkpoint.  A
    tag wins over the config."""
    found: dict[str, str] = {}
    opdweb = config.get("opdweb", {}).get("value") if isinstance(config.get("opdweb"), dict) else None
    for key, names in _CONFIG_NAMES.items():
        values = [config[key].get("value") if isinstance(config.get(key), dict) else None]
        if isinstance(opdweb, dict):
            values += [opdweb.get(name) for name in names]
        values += [tag[len(key) + 1:] for tag in tags if tag.startswith((key + "=", key + ":"))]
        for value in values:
            if value is not None and value != "":
                found[key] = str(value)
    return found


def do_upsert(token: ApiToken, data: dict) -> tuple[WandbRun, bool]:
    """``upsertBucket``: start the run (its project made if new), or update it (config,
    tags, name, group, notes); an ended run it names is open again (``resume``).  Returns
    the run and whether it was made."""
    entity, project_name = data.get("entityName"), data.get("modelName") or DEFAULT_PROJECT
    name = _text(data.get("name") or data.get("id"), "the run's id", MAX_NAME_LENGTH) or uuid.uuid4().hex[:8]
    _text(project_name, "the project", MAX_EXPERIMENT_NAME_LENGTH)
    display = _text(data.get("displayName"), "the run's name", 250)
    group = _text(data.get("groupName"), "the run's group", MAX_NAME_LENGTH)
    job_type = _text(data.get("jobType"), "the run's job type", 64)
    notes = _text(data.get("notes"), "the run's notes", 10_000)
    config = _json_object(data.get("config"), "the run's config")
    summary = _json_object(data.get("summaryMetrics"), "the run's summary")
    tags = data.get("tags")
    if tags is not None and (len(tags) > MAX_TAGS or any(len(t) > MAX_TAG_LENGTH for t in tags)):
        raise WandbRefused(f"a run has at most {MAX_TAGS} tags of at most {MAX_TAG_LENGTH} characters each")
    try:
        return _upsert(token, entity, project_name, name, display=display, group=group, job_type=job_type,
                       notes=notes, config=config, summary=summary, tags=tags)
    except IntegrityError:  # two upserts made the same new run at once: the other one's is there now
        return _upsert(token, entity, project_name, name, display=display, group=group, job_type=job_type,
                       notes=notes, config=config, summary=summary, tags=tags)


def _upsert(token: ApiToken, entity: str | None, project_name: str, name: str, *, display: str, group: str,
            job_type: str, notes: str, config: dict | None, summary: dict | None, tags: list[str] | None
            ) -> tuple[WandbRun, bool]:
    with transaction.atomic():
        wb = run_in(token, entity, project_name, name, lock=True)
        inserted = wb is None
        if wb is None:
            exp, _ = MlflowExperiment.objects.get_or_create(team_id=token.team_id, name=project_name,
                                                            defaults={"created_by": token.user})
            mlflow_tags = {RUN_NAME_TAG: display or name, "wandb.id": name}
            run = actions.start_run_in(token, exp, run_name=display or name, user_id=token.user.username,
                                       tags=mlflow_tags, extra_config={"wandb": {"project": exp.name, "id": name}})
            wb = WandbRun.objects.create(run=run, experiment=exp, name=name)
        job = wb.run.job
        if job.is_terminal:
            job.reopen_external()
            wb.run.end_time = None
            wb.run.save(update_fields=["end_time"])
            audit.record(token.team, token.user, audit.RUN_STARTED,
                         f"resumed external run #{job.pk} ({job.name}) from W&B with token {token.name!r}",
                         subject="job", subject_id=job.pk, kind=job.kind, run_id=wb.run.run_id)
            transaction.on_commit(lambda: live.publish_state(job))
        for field, value in (("group", group), ("job_type", job_type), ("notes", notes)):
            if value:
                setattr(wb, field, value)
        if tags is not None:
            wb.tags = list(tags)
        if config is not None:
            wb.config = config
        if summary is not None:
            wb.summary = summary
        wb.save()
        if display and display[:200] != job.name:
            job.name = display[:200]
            job.save(update_fields=["name"])
        linking.do_link(job, link_tags(wb.tags, wb.config))
    return wb, inserted


def do_stream(token: ApiToken, entity: str, project_name: str, name: str, update: StreamUpdate) -> dict:
    """One file-stream request: history lines to points (each once: a line already received,
    by its offset, is skipped, and a point is one per key and step), the summary, the
    console lines to the job's log, system-metric line counts, and the run's end."""
    with transaction.atomic():
        wb = run_in(token, entity, project_name, name, lock=True)
        if wb is None:
            raise WandbRefused(f"no run {name!r} in project {project_name!r} of team {token.team.slug}", status=404)
        job = wb.run.job
        if job.is_terminal and not update.is_empty:
            raise WandbRefused(f"run {name} has ended ({job.state}); resume it (wandb.init(id=..., resume='must')) "
                               "to log more; nothing was written", status=409)
        fields = []
        history = update.history.after(wb.history_lines)
        if history.lines:
            actions.write_series(job, update.series(history))
            wb.history_lines, wb.history_tail = history.end, history.lines[-1]
            fields += ["history_lines", "history_tail"]
        events = update.events.after(wb.events_lines)
        if events.lines:
            wb.events_lines, wb.events_tail = events.end, events.lines[-1]
            fields += ["events_lines", "events_tail"]
        console = update.output.after(wb.output_lines)
        if console.lines:
            wb.output_lines = console.end
            fields.append("output_lines")
            _log(job.pk, [("ERROR", line.removeprefix("ERROR ")) if line.startswith("ERROR ") else ("INFO", line)
                          for line in console.lines])  # wandb-core marks stderr lines "ERROR "
        if update.summary is not None:
            wb.summary = json_safe(update.summary)
            fields.append("summary")
        if update.dropped:
            dropped = update.dropped
            named = "; ".join(dropped[:5]) + (f" (and {len(dropped) - 5} more)" if len(dropped) > 5 else "")
            _log(job.pk, [("WARNING", f"{len(dropped)} logged values not kept as points: {named}")])
        if fields:
            wb.save(update_fields=fields)
        if update.complete and not job.is_terminal:
            job.finish(JobState.SUCCEEDED if update.exit_code == 0 else JobState.FAILED,
                       error="" if update.exit_code == 0 else f"the trainer exited with code {update.exit_code}")
            wb.run.end_time = int(timezone.now().timestamp() * 1000)
            wb.run.save(update_fields=["end_time"])
            transaction.on_commit(lambda: live.publish_state(job))
    return {"exitcode": None, "limits": {}, "stopped": job.cancel_requested}


def _log(job_id: int, lines: list[tuple[str, str]]) -> None:
    """``(level, message)`` lines into the job's log, sent to its open pages once committed."""
    from opdweb.jobs.models import JobLogEntry

    now = timezone.now()
    entries = JobLogEntry.objects.bulk_create([JobLogEntry(job_id=job_id, created_at=now, level=level,
                                                           message=message[:10_000]) for level, message in lines])
    transaction.on_commit(lambda: live.publish_log(job_id, entries))


def do_alert(token: ApiToken, entity: str, project_name: str, name: str, *, title: str, text: str,
             severity: str) -> None:
    """``wandb.alert``: kept with the run, beside the product's alerts, and in its log."""
    title, text = _text(title, "the alert's title", 500), _text(text, "the alert's text", 10_000)
    with transaction.atomic():
        wb = run_in(token, entity, project_name, name, lock=True)
        if wb is None:
            raise WandbRefused(f"no run {name!r} in project {project_name!r} of team {token.team.slug}", status=404)
        job = wb.run.job
        if TrainerAlert.objects.filter(job=job).count() >= MAX_ALERTS_PER_RUN:
            raise WandbRefused(f"a run keeps at most {MAX_ALERTS_PER_RUN} of its own alerts", status=429)
        alert = TrainerAlert.objects.create(job=job, title=title, text=text, severity=severity or "INFO")
        _log(job.pk, [("ERROR" if alert.severity == "ERROR" else "INFO",
                       f"wandb.alert {alert.severity}: {title}: {text}")])


def do_stop(token: ApiToken, storage: str) -> bool:
    """``stopRun`` (the W&B page's stop button, asked of a run by id): the run is asked to
    stop (its client reads it from the file stream's answer)."""
    wb = run_by_storage_id(token, storage)
    if wb is None:
        raise WandbRefused(f"no run {storage!r} in team {token.team.slug}", status=404)
    job = wb.run.job
    type(job).objects.filter(pk=job.pk).update(cancel_requested=True)
    return True

