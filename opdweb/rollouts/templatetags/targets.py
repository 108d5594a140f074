"""``{{ rollout|admitted_for }}``: the trainers (with their versions) a rollout config names as
its targets, so a verdict and an approval say which deployed engine they speak for."""
from __future__ import annotations

from django import template

from opdweb.exports import FORMATS, TRAINERS

register = template.Library()


@register.filter
def admitted_for(rollout) -> str:
    """"vLLM 0.32.0, verl 0.9.1" for a config naming those targets; "" for none."""
    targets = rollout.get("targets") or [] if isinstance(rollout, dict) else []
    return ", ".join(FORMATS[slug].target for slug in targets if slug in FORMATS)


@register.simple_tag
def trainer_targets() -> list[tuple[str, str]]:
    """(slug, trainer and version) of every trainer a config can be admitted for."""
    return [(slug, FORMATS[slug].target) for slug in TRAINERS]
