"""Who may see a registered model: members of its team, any role; anyone else gets a 404
(other teams' models are never revealed)."""
from __future__ import annotations

from django.http import Http404

from opdweb.registry.models import RegisteredModel
from opdweb.teams.access import teams_of


def visible_model(user, model_id: int) -> RegisteredModel:
    model = RegisteredModel.objects.filter(pk=model_id, team__in=teams_of(user)).select_related("team").first()
    if model is None:
        raise Http404(f"model #{model_id} not found")
    return model
