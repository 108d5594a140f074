"""What uses a registered model: the team's jobs that name its path as their model or
teacher, and the team's budgets calibrated on it.  A model with any is not deleted."""
from __future__ import annotations

from django.db.models import Q, QuerySet

from opdweb.budgets.models import MismatchBudget
from opdweb.jobs.models import Job
from opdweb.registry.models import RegisteredModel
from workers.science.kinds import Kind


def jobs_using(model: RegisteredModel) -> QuerySet[Job]:
    return (Job.objects.filter(Q(config__model=model.path) | Q(config__teacher=model.path), team=model.team_id)
            .exclude(kind=Kind.DESCRIBE))  # reading it is not using it


def budgets_of(model: RegisteredModel) -> QuerySet[MismatchBudget]:
    return MismatchBudget.objects.filter(team=model.team_id, checkpoint=model.path)


def is_referenced(model: RegisteredModel) -> bool:
    return jobs_using(model).exists() or budgets_of(model).exists()
