"""The links MLflow's client prints (``View run … at <tracking URI>/#/experiments/1/runs/<id>``):
the part after ``#`` never reaches a server, so ``/mlflow/`` answers a small page whose
script reads it and goes on to ``/mlflow/runs/<id>``, which sends a signed-in member of
the run's team to the run's job page (anyone else: 404, as for any job of another team).
The wandb client's links (``<base>/<entity>/<project>/runs/<id>``) go there directly."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_safe

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


@require_safe
@login_required
def wandb_run_page(request, entity: str, project: str, name: str):
    """The run link the wandb client prints (``View run at <base>/<entity>/<project>/runs/<id>``):
    the run's job page, for a member of the team the entity names."""
    from opdweb.runs.models import WandbRun

    job_id = WandbRun.objects.filter(experiment__team__slug=entity, experiment__name=project, name=name).values_list(
        "run__job_id", flat=True).first()
    if job_id is None:
        raise Http404(f"no W&B run {entity}/{project}/{name}")
    return redirect("jobs:detail", job_id=visible_job(request.user, job_id).pk)


@require_safe
@login_required
def wandb_project_page(request, entity: str, project: str):
    """A project's link: the team's jobs, where its runs are listed."""
    return redirect("jobs:list")
