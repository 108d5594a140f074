"""Registering a model: the path is resolved inside the model roots and checked like a
worker's preflight would (a checkpoint directory with config.json and a tokenizer, or a
hub id this installation may load), so a bad path is refused here with its reason and
nothing is written."""
from __future__ import annotations

from pathlib import Path

from django.db import IntegrityError, transaction

from opdweb.refusals import Refused
from opdweb.registry.models import RegisteredModel
from opdweb.sandbox import OutsideSandbox, confine_model
from workers.science.fingerprint import TOKENIZER_GLOBS, checkpoint_digest
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
    digest = checkpoint_digest(resolved) or ""  # none for a hub id
    if (same := RegisteredModel.objects.filter(team=team, path=resolved).first()) is not None:
        raise Refused(f"path: {resolved!r} is already registered as {same.name!r}", status=409)
    try:
        with transaction.atomic():
            return RegisteredModel.objects.create(team=team, name=name, path=resolved, kind=kind,
                                                  digest=digest, created_by=user)
    except IntegrityError as exc:  # registered at the same moment by someone else: say which rule it broke
        constraint = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", "") or ""
        if constraint.endswith("path_unique_in_team"):
            same = RegisteredModel.objects.filter(team=team, path=resolved).first()
            raise Refused(f"path: {resolved!r} is already registered as {same.name if same else '?'!r}",
                          status=409) from None
        raise Refused(f"name: team {team.slug} already has a model named {name!r}", status=409) from None
