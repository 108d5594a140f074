"""The model picker of the job form: the registered models of each of the user's teams."""
from __future__ import annotations

from opdweb.jobs.config_form import PICKERS
from opdweb.registry.models import RegisteredModel
from opdweb.teams.access import teams_of


def offered_models(user) -> dict[str, list[tuple[str, str]]]:
    by_team: dict[str, list[tuple[str, str]]] = {}
    for model in RegisteredModel.objects.filter(team__in=teams_of(user)).select_related("team"):
        by_team.setdefault(model.team.slug, []).append((model.path, f"{model.name} ({model.kind})"))
    return by_team


PICKERS["model"] = offered_models
