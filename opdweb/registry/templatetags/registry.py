"""``{% team_models user as models %}``: the registered models of each of the user's teams,
by team slug, for the pickers of the job and approval forms."""
from __future__ import annotations

from django import template

from opdweb.registry.descriptions import import_note
from opdweb.registry.models import RegisteredModel
from opdweb.sandbox import OutsideSandbox, confine_model
from opdweb.teams.access import teams_of

register = template.Library()


@register.simple_tag
def team_models(user) -> dict[str, list[dict]]:
    by_team: dict[str, list[dict]] = {}
    for model in RegisteredModel.objects.filter(team__in=teams_of(user)).select_related("team"):
        by_team.setdefault(model.team.slug, []).append({"name": model.name, "path": model.path, "kind": model.kind})
    return by_team


@register.simple_tag
def models_of(team) -> list[RegisteredModel]:
    """``{% models_of team as models %}``: one team's registered models."""
    return list(RegisteredModel.objects.filter(team=team))


@register.simple_tag
def weights_note(checkpoint) -> str:
    """``{% weights_note job.config.model as note %}``: what an imported checkpoint's record
    says its weights went through (``opdweb_import.json``, as the describe job read it:
    "dequantized from GGUF Q4_1 ..."),
    so every page with figures on it says so; "" for any other checkpoint."""
    if not isinstance(checkpoint, str) or not checkpoint:
        return ""
    try:
        return import_note(confine_model(checkpoint))
    except OutsideSandbox:
        return ""
