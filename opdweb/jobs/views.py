"""Job pages: the list, a submit form, the live detail page, and several jobs compared."""
from __future__ import annotations

import json
from typing import Callable

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.http import QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from pydantic import BaseModel

from opdweb.api import load_json
from opdweb.jobs.access import may_see_traceback, visible_job
from opdweb.jobs.actions import do_cancel_job, do_submit_job
from opdweb.jobs.chart_layout import layout_of
from opdweb.jobs.compare import (
    compared_jobs,
    compared_series,
    metric_rows,
    parameter_rows,
    parse_compared_ids,
    series_rows,
)
from opdweb.jobs.config_form import PICKERS, config_from_inputs, form_inputs, form_rows, problems_by_input
from opdweb.jobs.history import history_reads
from opdweb.jobs.listing import LISTED_KINDS, JobListView
from opdweb.jobs.models import Job, JobState
from opdweb.jobs.result_charts import presented
from opdweb.jobs.scheduling import queue_place
from opdweb.jobs.summaries import child_rows
from opdweb.pages import answers_refusals
from opdweb.refusals import Refused
from opdweb.sandbox import product_values
from opdweb.teams.access import teams_of
from opdweb.teams.models import Role
from opdweb.traces.models import TraceSeries
from workers.science.entrypoints import KINDS
from workers.science.kinds import Kind

LOG_PAGE_LINES = 500

#: Per kind, a function ``(user, query parameters, example config) -> form fields`` that fills
#: the new-job form from objects named in the link (a config and a budget for an admission
#: check); apps register theirs, so this app needs none of theirs.
FORM_PREFILLS: dict[str, Callable[[object, QueryDict, dict], dict]] = {}


@login_required
@answers_refusals
def job_list(request):
    view = JobListView.from_query(request.GET)
    teams = teams_of(request.user)
    page = view.page_of(Job.objects.filter(team__in=teams))
    columns = [(label, column, view.sort_link(column), sort_arrow(view.sort, column))
               for label, column in (("#", "id"), ("Kind", "kind"), ("Name", "name"), ("State", "state"),
                                     ("Created", "created"), ("By", "user"))]
    users = get_user_model().objects.filter(memberships__team__in=teams).distinct().order_by("username")
    context = {"jobs": page.object_list, "page": page, "view": view, "columns": columns,
               "kinds": LISTED_KINDS, "states": JobState.values, "usernames": users.values_list("username", flat=True),
               "previous_url": view.url(page=str(page.previous_page_number())) if page.has_previous() else "",
               "next_url": view.url(page=str(page.next_page_number())) if page.has_next() else ""}
    return render(request, "jobs/list.html", context)


def sort_arrow(sort: str, column: str) -> str:
    return {column: "▲", f"-{column}": "▼"}.get(sort, "")


def example_configs() -> dict[str, dict]:
    """Each kind's starting config for the form, pointed at the toy student that
    ``make run`` builds under the data directory."""
    student = str(settings.DATA_DIR / "toy" / "test" / "student")
    return {name: kind.example(student) for name, kind in KINDS.items()}


@login_required
def job_new(request):
    """The job form: each kind's fields from its schema, and its config as JSON under
    "Advanced (JSON)"; either view submits (``view=fields`` or the JSON box) through the
    same validation, and a refusal is shown at the inputs that caused it, as sent."""
    teams = list(teams_of(request.user, Role.MEMBER))
    examples = example_configs()
    form = {"kind": Kind.SELFTEST.value, "config": json.dumps(examples[Kind.SELFTEST], indent=2), "name": "",
            "team": teams[0].slug if teams else ""}
    if request.GET.get("kind") in examples:
        form.update(kind=request.GET["kind"], config=json.dumps(examples[request.GET["kind"]], indent=2))
    if request.GET.get("clone", "").isdigit():
        form.update(cloned_form(request.user, int(request.GET["clone"]), request.GET.get("prompts", ""),
                                request.GET.get("levels", ""), request.GET.get("max_seeds", "")))
    elif request.GET.get("kind") in FORM_PREFILLS:
        form.update(FORM_PREFILLS[request.GET["kind"]](request.user, request.GET, examples[request.GET["kind"]]))
    error, problems, view, status = None, [], "fields", 200
    if request.method == "POST":
        form = {k: request.POST.get(k, "") for k in ("kind", "config", "name", "team")}
        view = "fields" if request.POST.get("view") == "fields" else "json"
        team = next((t for t in teams if t.slug == form["team"]), None)
        try:
            if team is None:
                raise Refused("choose a team you can submit to", status=403)
            if view == "fields" and form["kind"] in KINDS:
                config, problems = config_from_inputs(form_inputs(KINDS[form["kind"]].config), request.POST)
                form["config"] = json.dumps(config, indent=2)
                if problems:
                    raise Refused("; ".join(f"{p['field']}: {p['message']}" for p in problems), details=problems)
            else:
                config = load_json(form["config"] or "{}", "config")
            job = do_submit_job(team=team, user=request.user, kind_name=form["kind"], config=config, name=form["name"])
        except Refused as exc:
            error, status, problems = str(exc), exc.status, exc.details or problems
        else:
            return redirect("jobs:detail", job_id=job.pk)
    context = {"form": form, "teams": teams, "kinds": KINDS.values(), "error": error, "examples": examples,
               "view": view, "problems_shown": problems_summary(problems) if view == "fields" else "",
               **kind_forms(request, form, examples, view, problems)}
    return render(request, "jobs/new.html", context, status=status)


def problems_summary(problems: list[dict]) -> str:
    n = len(problems)
    return f"{n} problem{'s' if n != 1 else ''} in the config, shown at {'its field' if n == 1 else 'their fields'}" \
        if n else ""


def dotted_keys(config: dict, prefix: str = "") -> list[str]:
    """Every path a config sets: ``{"rollout": {"weights": ...}}`` gives ``rollout`` and ``rollout.weights``."""
    keys = []
    for key, value in config.items():
        keys.append(prefix + key)
        if isinstance(value, dict):
            keys += dotted_keys(value, prefix + key + ".")
    return keys


def grouped(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row)
    return list(groups.items())


def kind_forms(request, form: dict, examples: dict, view: str, problems: list[dict]) -> dict:
    """Each kind's fields: the chosen kind's from the form (as sent, after a refusal of the
    fields view), the others' from their example; the problems that belong to no input."""
    try:
        shown = json.loads(form["config"] or "{}")
    except (ValueError, RecursionError):
        shown = {}  # a JSON box that is not JSON: the fields show the example; the box keeps the text
    shown = shown if isinstance(shown, dict) else {}
    choices_by_team = {picker: offer(request.user) for picker, offer in PICKERS.items()}
    choices = {picker: offered.get(form["team"], []) for picker, offered in choices_by_team.items()}
    forms, general = [], problems
    for name, kind in KINDS.items():
        inputs = form_inputs(kind.config)
        chosen = name == form["kind"]
        errors: dict[str, list[str]] = {}
        if chosen and view == "fields":
            errors, general = problems_by_input(inputs, problems)
        sent = request.POST if chosen and request.method == "POST" and view == "fields" else None
        config = shown if chosen else examples[name]
        rows = form_rows(name, inputs, config, sent, errors, choices)
        # Shown: what is required, what the config (the example) sets, what has a problem;
        # the rest waits, folded, at its defaults (a calibration has some 70 settings).
        named = set(dotted_keys(config))
        main = [r for r in rows if r["field"].required or r["errors"] or r["field"].name in named]
        more = [r for r in rows if r not in main]
        forms.append({"kind": name, "chosen": chosen, "groups": grouped(main), "more_groups": grouped(more),
                      "more_count": len(more)})
    return {"kind_forms": forms, "general_problems": general, "picker_choices": choices_by_team}


def cloned_form(user, job_id: int, prompts: str, levels: str = "", max_seeds: str = "") -> dict:
    """The form filled from a job the user can see (re-run, or extend a measurement with
    more prompts: the same seed measures the same first prompts again, the BF16 reference
    comes from the cache; or calibrate again with the ``levels`` and ``max_seeds`` that
    would decide a budget's not-shown-safe zone).  Values that do not parse are left out:
    the form's validation speaks for the config."""
    job = visible_job(user, job_id)
    config = resubmitted_config(job, int(prompts) if prompts.isdigit() else None)
    if job.kind == Kind.CALIBRATION:
        try:
            config["levels"] = [float(v) for v in levels.split(",")] if levels else config.get("levels")
        except ValueError:
            pass
        if max_seeds.isdigit():
            config["max_seeds"] = int(max_seeds)
    return {"kind": job.kind, "config": json.dumps(config, indent=2), "team": job.team.slug,
            "name": (job.name or f"re-run of #{job.pk}")[:200]}


def resubmitted_config(job, prompts: int | None = None) -> dict:
    """``job``'s config as a submission takes it again (a budget by its id, no product-set
    values), with ``prompts`` where given."""
    config = dict(job.config)
    if job.kind == Kind.ADMISSION and isinstance(config.get("budget"), dict):
        config["budget"] = config["budget"].get("id")  # a submission names the budget by its id
    for product_field in product_values(job):  # the worker fills these in; a config may not set them
        config.pop(product_field, None)
    if prompts is not None and "prompts" in config:
        config["prompts"] = prompts
    return config


@login_required
@require_POST
@answers_refusals
def job_extend(request, job_id: int):
    """"Extend to decide": the same measurement again with the prompts its verdict said would
    likely decide it (the same seed, so the first prompts are the same and the BF16 reference
    is read from the cache), submitted at once."""
    job = visible_job(request.user, job_id, Role.MEMBER)
    prompts = request.POST.get("prompts", "")
    current = int(job.config.get("prompts") or 0)
    if not prompts.isdigit() or int(prompts) <= current:
        raise Refused(f"prompts: give a whole number above this check's {current} (got {prompts!r})",
                      details=[{"field": "prompts", "message": "must be more than before"}])
    extended = do_submit_job(team=job.team, user=request.user, kind_name=job.kind,
                             config=resubmitted_config(job, int(prompts)),
                             name=f"{job.name or f'#{job.pk}'} (extended to {int(prompts):,} prompts)"[:200])
    return redirect("jobs:detail", job_id=extended.pk)


def mismatch_summary(result: BaseModel | None) -> dict | None:
    """The headline of a typed result that measured a multiple (a mismatch report, and the
    reports that contain one) for people: the multiple with its interval, and every metric
    beside the BF16 reference's."""
    if result is None or "multiple" not in type(result).model_fields:
        return None
    metrics: dict = getattr(result, "metrics", None) or {}
    reference: dict = getattr(result, "reference_metrics", None) or {}
    rows = [(name, metrics[name], reference.get(name)) for name in sorted(metrics)]
    return {**result.model_dump(mode="json"), "rows": rows}


@login_required
def job_detail(request, job_id: int):
    job = visible_job(request.user, job_id)
    can_cancel = not job.is_terminal and job.viewer_role >= Role.MEMBER
    return render(
        request,
        "jobs/detail.html",
        {"job": job, "can_cancel": can_cancel, "show_traceback": may_see_traceback(request.user, job.viewer_role),
         "config_json": json.dumps(job.config, indent=2),
         "result_json": json.dumps(job.result, indent=2) if job.result is not None else "",
         "children": child_rows(job), "place": queue_place(job),
         "chart_layout": layout_of(request.user),
         **result_context(job), **log_context(job), **chart_context(job)},
    )


def result_context(job) -> dict:
    """The typed result, its kind's presenter and figures, and the multiple's summary."""
    context = presented(job)
    return {**context, "mismatch": mismatch_summary(context["result"])}


def chart_context(job) -> dict:
    """The job's series (key and last step, from which the page resumes live), and the
    batched reads of their whole history, which the page starts in its head, before
    plotly and the rest of the page have loaded."""
    series = list(TraceSeries.objects.filter(job=job).order_by("key").values("key", "last_step"))
    return {"series": series, "history_reads": history_reads(job.pk, [s["key"] for s in series])}


def log_context(job) -> dict:
    """The newest ``LOG_PAGE_LINES`` log lines (the page follows the rest live), how many
    earlier ones the page leaves out, and the id the live channel resumes the log after."""
    entries = list(reversed(job.log_entries.order_by("-pk")[:LOG_PAGE_LINES]))
    earlier = job.log_entries.filter(pk__lt=entries[0].pk).count() if entries else 0
    return {"log_entries": entries, "log_earlier": earlier, "log_after": entries[-1].pk if entries else 0}


@login_required
@answers_refusals
def job_compare(request):
    jobs = compared_jobs(request.user, parse_compared_ids(request.GET.getlist("ids")))
    ids = ",".join(str(job.pk) for job in jobs)
    series = compared_series(jobs)
    return render(request, "jobs/compare.html", {
        "jobs": jobs, "ids": ids, "parameters": parameter_rows([{"kind": job.kind, **job.config} for job in jobs]),
        "metrics": metric_rows(jobs), "series_rows": series_rows(jobs, series["trace_keys"]),
        "legend_names": {job.pk: f"#{job.pk} {job.name or job.kind}"[:80] for job in jobs},
        **series, "only_differences": request.GET.get("diff") == "1"})


@login_required
@require_POST
def job_cancel(request, job_id: int):
    try:
        job = do_cancel_job(visible_job(request.user, job_id, Role.MEMBER), user=request.user)
        messages.info(request, f"cancel of job #{job.pk} requested")
    except Refused as exc:
        messages.error(request, str(exc))
    return redirect("jobs:detail", job_id=job_id)
