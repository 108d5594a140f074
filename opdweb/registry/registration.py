"""Registering a model: the reference is checked here without reading it (a local path is
resolved inside the model roots and looked up like a worker's preflight would: a checkpoint
directory with config.json and a tokenizer, or a hub id this installation may load; an
``s3://`` URI must lie inside an allowed prefix), so a bad one is refused with its reason
and nothing is written.  Its content is read by a worker: registering queues a ``describe``
job, whose result gives the model its digest."""
from __future__ import annotations

from pathlib import Path

from django.db import IntegrityError, transaction

from opdweb.refusals import Refused
from opdweb.registry.descriptions import queue_describe
from opdweb.registry.models import RegisteredModel
from opdweb.sandbox import OutsideSandbox, confine_model
from workers.science.checkpoints.uri import is_remote
from workers.science.fingerprint import TOKENIZER_GLOBS
from workers.science.preflight import check_model


def has_tokenizer(directory: Path) -> bool:
    return any(f.is_file() for pattern in TOKENIZER_GLOBS for f in directory.glob(pattern))


def validated_path(path: str) -> str:
    """The resolved path (or hub id) of a loadable model; :class:`Refused` (400) naming why not."""
    if not path.strip():
        raise Refused("path: give a checkpoint directory or a hub id")
    try:
        resolved = confine_model(path.strip())
    except OutsideSandbox as exc:
        raise Refused(f"path: {exc}") from None
    if is_remote(resolved):
        return resolved  # what is there is for the describe job to say
    problems = check_model(resolved)
    if not problems and Path(resolved).is_dir() and not has_tokenizer(Path(resolved)):
        problems = [f"model: {resolved!r} has no tokenizer files (tokenizer.json, vocab.*, *.model)"]
    if problems:
        raise Refused("; ".join(problems))
    return resolved


def register_model(*, team, user, name: str, path: str, kind: str) -> RegisteredModel:
    name, kind = name.strip(), kind.strip()
    if not name or len(name) > 200:
        raise Refused("name: give a name of at most 200 characters")
    if not kind or len(kind) > 40:
        raise Refused("kind: give a kind (student, teacher, checkpoint or a label of at most 40 characters)")
    resolved = validated_path(path)
    if (same := RegisteredModel.objects.filter(team=team, path=resolved).first()) is not None:
        raise Refused(f"path: {resolved!r} is already registered as {same.name!r}", status=409)
    try:
        with transaction.atomic():
            model = RegisteredModel.objects.create(team=team, name=name, path=resolved, kind=kind, created_by=user)
            if is_remote(resolved) or Path(resolved).is_dir():  # a hub id has no files of ours to read
                model.describe_job = queue_describe(team=team, user=user, uri=resolved)
                model.save(update_fields=["describe_job"])
            return model
    except IntegrityError as exc:  # registered at the same moment by someone else: say which rule it broke
        constraint = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", "") or ""
        if constraint.endswith("path_unique_in_team"):
            same = RegisteredModel.objects.filter(team=team, path=resolved).first()
            raise Refused(f"path: {resolved!r} is already registered as {same.name if same else '?'!r}",
                          status=409) from None
        raise Refused(f"name: team {team.slug} already has a model named {name!r}", status=409) from None
