"""The links MLflow's client prints (``View run … at <tracking URI>/#/experiments/1/runs/<id>``):
the part after ``#`` never reaches a server, so ``/mlflow/`` answers a small page whose
script reads it and goes on to ``/mlflow/runs/<id>``, which sends a signed-in member of
the run's team to the run's job page (anyone else: 404, as for any job of another team)."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render

from opdweb.jobs.access import visible_job
from opdweb.runs.models import MlflowRun


def link_page(request):
    return render(request, "runs/mlflow_link.html")


@login_required
def run_page(request, run_id: str):
    job_id = MlflowRun.objects.filter(run_id=run_id).values_list("job_id", flat=True).first()
    if job_id is None:
        raise Http404(f"no MLflow run {run_id}")
    return redirect("jobs:detail", job_id=visible_job(request.user, job_id).pk)


@login_required
def experiment_page(request, experiment_id: str):
    """An experiment's link: the team's jobs, where its runs are listed."""
    return redirect("jobs:list")
