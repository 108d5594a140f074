"""``{% config_of job as record %}``: the team's saved rollout config a job ran (by content
hash), so a job's page links back to its config and on to the next step of the decision."""
from __future__ import annotations

from django import template

from opdweb.rollouts.canonical import hash_of_rollout
from opdweb.rollouts.models import RolloutConfigRecord

register = template.Library()


@register.simple_tag
def config_of(job) -> RolloutConfigRecord | None:
    """The saved config of ``job``'s team whose hash is the job's rollout's; None if unsaved."""
    wanted = hash_of_rollout((job.config or {}).get("rollout"))
    if wanted is None:
        return None
    return RolloutConfigRecord.objects.filter(team_id=job.team_id, config_hash=wanted).first()
