"""What people do to rollout configs.  ``check_*`` validates, ``do_*`` acts; every action
writes its audit entry in the same transaction."""
from __future__ import annotations

from django.db import IntegrityError, transaction

from opdweb.refusals import Refused
from opdweb.rollouts.models import RolloutConfigRecord
from opdweb.rollouts.submission import check_rollout_config
from opdweb.teams import audit

NAME_MAX_LENGTH = RolloutConfigRecord._meta.get_field("name").max_length


def check_config_name(name: str | None) -> str:
    """The name stripped, or a 400: a name is one line of printable text (it heads every
    export of the config, and a newline in it could add lines to what is approved)."""
    name = (name or "").strip()
    problem = None
    if not name.isprintable():
        problem = "must be one line of printable text (no newlines, tabs or other control characters)"
    elif len(name) > NAME_MAX_LENGTH:
        problem = f"is {len(name):,} characters; a config name may be at most {NAME_MAX_LENGTH}"
    if problem:
        raise Refused(f"name: {problem}", details=[{"field": "name", "message": problem}])
    return name


def do_create_config(*, team, user, name: str, data: dict, derived_from=None) -> tuple[RolloutConfigRecord, bool]:
    """The team's record of this config: a new one, or the one that already has its hash
    (records are immutable: the same content is the same record).  Returns ``(record, created)``."""
    name = check_config_name(name)
    canonical, digest = check_rollout_config(data)
    name = name or f"config {digest[:12]}"
    existing = RolloutConfigRecord.objects.filter(team=team, config_hash=digest).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            record = RolloutConfigRecord.objects.create(team=team, name=name, config=canonical, config_hash=digest,
                                                        created_by=user, derived_from=derived_from)
            audit.record(team, user, audit.CONFIG_CREATED, f"created config {record.name} ({digest[:12]})",
                         subject="config", subject_id=record.pk, config_hash=digest)
    except IntegrityError:  # the same config created at the same moment by someone else
        return RolloutConfigRecord.objects.get(team=team, config_hash=digest), False
    return record, True
