"""Which configs a user may see or act on: the team rule of :mod:`opdweb.teams.access`
(another team's config is a 404, never revealed; too low a role in its own team is a 403)."""
from __future__ import annotations

from opdweb.rollouts.models import RolloutConfigRecord
from opdweb.teams.access import visible_in_team
from opdweb.teams.models import Role


def visible_config(user, pk: int, min_role: Role = Role.VIEWER) -> RolloutConfigRecord:
    return visible_in_team(RolloutConfigRecord, "rollout config", user, pk, min_role, related=("created_by",))
