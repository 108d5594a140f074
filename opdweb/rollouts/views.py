"""Rollout config pages: the list, the form (fields, presets, YAML paste or upload), a
config's page with its jobs (its approvals come from the approvals app's template tag),
and configs compared."""
from __future__ import annotations

import yaml
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render

from opdweb.budgets.models import MismatchBudget
from opdweb.exports import TRAINERS
from opdweb.jobs.compare import parameter_rows, parse_compared_ids
from opdweb.pages import answers_refusals
from opdweb.refusals import Refused
from opdweb.rollouts.access import visible_config
from opdweb.rollouts.actions import do_create_config
from opdweb.rollouts.canonical import ValidationError, canonical_rollout
from opdweb.rollouts.compare import compared_configs, verdict_rows
from opdweb.rollouts.evidence import ADMISSION_KIND, jobs_using, verdict_of
from opdweb.rollouts.form_schema import ROLLOUT_FIELDS, SCHEMA_PARAGRAPHS, value_at
from opdweb.rollouts.models import RolloutConfigRecord
from opdweb.rollouts.presets import PRESETS, PRESETS_BY_SLUG
from opdweb.rollouts.submission import config_from_form, config_from_yaml
from opdweb.teams.access import teams_of
from opdweb.teams.models import Role
from workers.science.config import RolloutConfig


@login_required
def config_list(request):
    records = (RolloutConfigRecord.objects.filter(team__in=teams_of(request.user))
               .select_related("team", "created_by")[:500])
    return render(request, "rollouts/list.html", {"records": records})


@login_required
@answers_refusals
def config_compare(request):
    records = compared_configs(request.user, parse_compared_ids(request.GET.getlist("ids"), "configs"))
    return render(request, "rollouts/compare.html", {
        "records": records, "ids": ",".join(str(r.pk) for r in records),
        "parameters": parameter_rows([r.config for r in records]), "verdicts": verdict_rows(records),
        "only_differences": request.GET.get("diff") == "1"})


def _shown_value(field, config: dict):
    value = value_at(config, field.name)
    if value is None:
        value = field.default
    if field.widget == "lines":
        return "\n".join(str(v) for v in value or [])
    return value


def _row_of(problem_field: str) -> str:
    """The form input a problem belongs to (``keep_bf16.3`` is the keep_bf16 box)."""
    return "keep_bf16" if problem_field.startswith("keep_bf16") else problem_field


def _form_rows(config: dict, problems: list[dict]) -> list[dict]:
    """Each field with the value to show and its problems, if any."""
    by_field: dict[str, list[str]] = {}
    for p in problems:
        row = _row_of(p["field"])
        prefix = f"entry {p['field'].split('.')[1]}: " if p["field"] != row else ""
        by_field.setdefault(row, []).append(prefix + p["message"])
    return [{"field": f, "value": _shown_value(f, config), "errors": by_field.get(f.name, [])} for f in ROLLOUT_FIELDS]


def _as_yaml(config: dict) -> str:
    """YAML in the schema's field order (PostgreSQL's jsonb keeps keys in its own order)."""
    try:
        config = canonical_rollout(config)
    except ValidationError:
        pass  # a partial or invalid config being edited: as typed
    return yaml.safe_dump(config, sort_keys=False)


@login_required
@answers_refusals
def config_new(request, derived_from: RolloutConfigRecord | None = None, adjusted: tuple[str, dict] | None = None):
    """The config form; ``derived_from`` an edit of that record, ``adjusted`` (a name and a
    config) what the form shows first in its place."""
    # An edit stays in its config's team (the new record names the one it came from).
    teams = [derived_from.team] if derived_from else list(teams_of(request.user, Role.MEMBER))
    if not teams:
        raise Refused("you are not a member of a team that can create rollout configs", status=403)
    preset = PRESETS_BY_SLUG.get(request.GET.get("preset", ""))
    shown = derived_from.config if derived_from else (preset.config if preset else {})  # what the form shows
    if adjusted:
        shown = adjusted[1]
    context = {
        "teams": teams, "presets": PRESETS, "preset": preset, "derived_from": derived_from,
        "team": derived_from.team.slug if derived_from else request.GET.get("team", teams[0].slug),
        "name": adjusted[0] if adjusted else derived_from.name if derived_from else (preset.title if preset else ""),
        "yaml_text": _as_yaml(shown), "schema_doc": SCHEMA_PARAGRAPHS, "problems": [], "error": None,
    }
    status, source = 200, "form"
    if request.method == "POST":
        source = request.POST.get("source", "form")
        context.update(team=request.POST.get("team", ""), name=request.POST.get("name", ""))
        try:
            team = next((t for t in teams if t.slug == context["team"]), None)
            if team is None:
                raise Refused("choose a team in which you can create configs", status=403)
            if source == "yaml":
                upload = request.FILES.get("yaml_file")
                text = _read_upload(upload) if upload else request.POST.get("yaml", "")
                context["yaml_text"] = text
                config = config_from_yaml(text)
            else:
                config = config_from_form(request.POST)
            record, created = do_create_config(team=team, user=request.user, name=context["name"], data=config,
                                               derived_from=derived_from)
        except Refused as exc:
            status, context["error"], context["problems"] = exc.status, str(exc), exc.details
            shown = config_from_form(request.POST, as_typed=True) if source == "form" else shown
        else:
            if not created:
                messages.info(request, f"this config already exists in team {team.slug} as {record.name}")
            return redirect("rollouts:detail", config_id=record.pk)
    from_form = request.method == "POST" and source == "form"
    context["rows"] = _form_rows(shown, context["problems"] if from_form else [])
    inputs = {f.name for f in ROLLOUT_FIELDS}
    context["general_problems"] = [p for p in context["problems"] if not from_form or _row_of(p["field"]) not in inputs]
    return render(request, "rollouts/new.html", context, status=status)


def _read_upload(upload) -> str:
    limit = settings.JOB_CONFIG_MAX_BYTES
    if upload.size > limit:
        raise Refused(f"the uploaded file is {upload.size:,} bytes; a rollout config may be at most {limit:,}",
                      status=413)
    try:
        return upload.read().decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("the uploaded file is not UTF-8 text; save it as UTF-8 YAML") from None


@login_required
@answers_refusals
def config_edit(request, config_id: int):
    """The form, filled with a record's config: submitting makes a new record."""
    return config_new(request, derived_from=visible_config(request.user, config_id, Role.MEMBER))


@login_required
@answers_refusals
def config_for_target(request, config_id: int, target: str):
    """"Admit for this trainer": the form filled with the nearest engine ``target`` builds
    (its ``nearest``), derived from the record; saving makes that config, to be checked."""
    record = visible_config(request.user, config_id, Role.MEMBER)
    module = TRAINERS.get(target)
    if module is None:
        raise Refused(f"unknown trainer {target!r}; one of {', '.join(TRAINERS)}", status=404)
    nearest = module.nearest(RolloutConfig.model_validate(record.config))
    return config_new(request, derived_from=record, adjusted=(f"{record.name} for {target}"[:200], nearest))


@login_required
def config_detail(request, config_id: int):
    record = visible_config(request.user, config_id)
    jobs = jobs_using(record)
    for job in jobs:
        job.verdict = verdict_of(job) if job.kind == ADMISSION_KIND else None
    checkpoints = sorted({job.config.get("model") for job in jobs if isinstance(job.config.get("model"), str)})
    return render(request, "rollouts/detail.html", {
        "record": record, "yaml_text": _as_yaml(record.config), "jobs": jobs,
        "checkpoints": checkpoints, "can_request": record.viewer_role >= Role.MEMBER,
        "budgets": MismatchBudget.objects.filter(team=record.team, superseded_by=None).order_by("-pk")[:50],
    })
