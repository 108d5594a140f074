"""Rollout configs side by side: which fields differ, and each config's latest admission
verdict on every checkpoint any of them was checked on."""
from __future__ import annotations

from opdweb.jobs.models import JobState
from opdweb.rollouts.access import visible_config
from opdweb.rollouts.evidence import ADMISSION_KIND, jobs_using
from opdweb.rollouts.models import RolloutConfigRecord


def compared_configs(user, ids: list[int]) -> list[RolloutConfigRecord]:
    """The configs, each one the user may see (another team's id is a 404)."""
    return [visible_config(user, pk) for pk in ids]


def verdict_rows(records: list[RolloutConfigRecord]) -> list[dict]:
    """Per checkpoint (sorted), each config's newest succeeded admission check there:
    ``{"checkpoint", "checks": [job or None per config]}``."""
    newest: list[dict[str, object]] = []
    for record in records:
        by_checkpoint: dict[str, object] = {}
        for job in jobs_using(record, kind=ADMISSION_KIND, state=JobState.SUCCEEDED):  # newest first
            model = job.config.get("model")
            if isinstance(model, str):
                by_checkpoint.setdefault(model, job)
        newest.append(by_checkpoint)
    checkpoints = sorted(set().union(*newest)) if newest else []
    return [{"checkpoint": c, "checks": [n.get(c) for n in newest]} for c in checkpoints]
