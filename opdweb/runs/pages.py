"""The run page's buttons: re-check a run that crossed its budget (an admission job on its
latest checkpoint with the approved config and budget, by the jobs' own submit path),
acknowledge an alert, and set or clear the run's own watch rule; the team's watch rule
page; and the download of a run's file.  Thin: each calls :mod:`.recheck`, :mod:`.watch`,
:mod:`.watch_rules` or :mod:`.mlflow_artifacts`."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from opdweb.jobs.access import visible_job
from opdweb.pages import answers_refusals
from opdweb.refusals import Refused
from opdweb.runs import mlflow_artifacts, watch, watch_rules
from opdweb.runs.models import WatchRule
from opdweb.runs.recheck import do_recheck
from opdweb.teams.access import team_for
from opdweb.teams.models import Role


@login_required
@require_POST
@answers_refusals
def recheck(request, job_id: int):
    run = visible_job(request.user, job_id, Role.MEMBER)
    try:
        job = do_recheck(run, request.user)
    except Refused as exc:
        messages.error(request, str(exc))
        return redirect("jobs:detail", job_id=job_id)
    messages.info(request, f"admission check #{job.pk} submitted on {job.config.get('model')}")
    return redirect("jobs:detail", job_id=job.pk)


@login_required
@require_POST
@answers_refusals
def acknowledge(request, job_id: int, alert_id: int):
    run = visible_job(request.user, job_id, Role.MEMBER)
    watch.do_acknowledge(run, alert_id, request.user)
    return redirect("jobs:detail", job_id=job_id)


@login_required
@require_POST
@answers_refusals
def run_watch_rule(request, job_id: int):
    """The run's own watch rule, set by a member from the run page (a refusal redraws the
    page with what was typed)."""
    run = visible_job(request.user, job_id, Role.MEMBER)
    watch_rules.do_set_run_rule(run, request.user, request.POST)
    messages.info(request, "the run's own watch rule is saved; it applies from the next point logged")
    return redirect("jobs:detail", job_id=job_id)


@login_required
@require_POST
@answers_refusals
def clear_run_watch_rule(request, job_id: int):
    run = visible_job(request.user, job_id, Role.MEMBER)
    watch_rules.do_clear_run_rule(run, request.user)
    messages.info(request, "the run is watched by its team's rule again")
    return redirect("jobs:detail", job_id=job_id)


@login_required
@answers_refusals
def team_watch_rule(request, slug: str):
    """The team's default watch rule: seen by its members, changed by its admins."""
    team = team_for(request.user, slug, Role.VIEWER)
    rule = WatchRule.objects.filter(team=team, job__isnull=True).first() or WatchRule(team=team)
    if request.method == "POST":
        team = team_for(request.user, slug, Role.ADMIN)
        watch_rules.do_set_team_rule(team, request.user, request.POST)
        messages.info(request, "watch rule saved")
        return redirect("run_pages:team_watch", slug=slug)
    return render(request, "runs/watch_rule.html", {"team": team, "rule": rule})


@login_required
@answers_refusals
def artifact(request, job_id: int, path: str):
    """One file of a run, for the team's members and viewers: always a download (never shown
    inline: a run's files are whatever its trainer uploaded)."""
    run = visible_job(request.user, job_id, Role.VIEWER)
    mlflow_run = getattr(run, "mlflow_run", None)
    if mlflow_run is None:
        raise Http404("this job is not an MLflow run")
    try:
        key = f"{mlflow_artifacts.run_prefix(mlflow_run)}/{mlflow_artifacts.clean_key(path)}"
    except mlflow_artifacts.BadURI:
        raise Refused(f"{path!r} is not a path of this run's files", status=400) from None
    return mlflow_artifacts.file_response(key)
