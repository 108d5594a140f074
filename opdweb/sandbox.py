"""Configs stay in the sandbox: every path a job config names is resolved and checked
against the configured roots before a job is written, and again in the worker before it
runs (a symlink may have changed in between).

A config schema marks its path fields with ``json_schema_extra={"sandbox": RULE}``:
``model`` (a checkpoint directory under ``OPDWEB_MODEL_ROOTS``, or a hub id where
``OPDWEB_ALLOW_HUB`` says so), ``data`` (a file under ``OPDWEB_DATA_ROOTS``; values matching
the field's ``builtin`` globs are not paths) or ``product`` (set by the product, never by
a user: the worker fills it in).  Resolution follows symlinks and ``..`` to the real path,
so neither can lead outside a root, and ``/proc`` or ``/etc`` are outside every root.

Beside :mod:`opdweb.refusals` rather than in an app: jobs, budgets, the registry and
approvals all confine paths with it, and it needs only the settings.
"""
from __future__ import annotations

import fnmatch
import re
from pathlib import Path

from django.conf import settings
from pydantic import BaseModel

from opdweb.refusals import Refused
from workers.science.checkpoints import uri as checkpoint_uri

# org/name as the Hugging Face hub spells a repository.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class OutsideSandbox(ValueError):
    pass


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def _resolve(value: str, roots: list[Path], what: str) -> Path:
    """The real path ``value`` names, absolute or relative to a root, inside a root."""
    if "\x00" in value:
        raise OutsideSandbox("is not a valid path (it contains a NUL character)")
    if not value.isprintable():  # a newline in a path would become a line of its own in an export
        raise OutsideSandbox("is not a usable path (it contains a newline or another control character)")
    try:
        return _resolve_path(value, roots, what)
    except (OSError, RuntimeError) as exc:  # a name too long, an unknown ~user, a loop of links
        raise OutsideSandbox(f"is not a usable path ({getattr(exc, 'strerror', None) or exc})") from None


def _resolve_path(value: str, roots: list[Path], what: str) -> Path:
    real_roots = [r.resolve() for r in roots]
    given = Path(value).expanduser()
    candidates = [given] if given.is_absolute() else [root / given for root in real_roots]
    for candidate in candidates:
        real = candidate.resolve()
        if _inside(real, real_roots) and real.exists():
            return real
    real = candidates[0].resolve()
    listed = ", ".join(str(r) for r in real_roots) or "none configured"
    if not _inside(real, real_roots):
        raise OutsideSandbox(f"{value!r} is outside the {what} roots ({listed})")
    raise OutsideSandbox(f"{value!r} does not exist under the {what} roots ({listed})")


def confine_uri(value: str) -> str:
    """An ``s3://`` checkpoint reference, normalised, inside a prefix of
    ``OPDWEB_CHECKPOINT_URIS`` (whole path segments: ``s3://b/team`` does not admit
    ``s3://b/team-other``; ``..`` is refused before any comparison)."""
    try:
        uri = checkpoint_uri.parse(value)
        allowed = [checkpoint_uri.parse(prefix) for prefix in settings.OPDWEB_CHECKPOINT_URIS]
    except checkpoint_uri.BadURI as exc:
        raise OutsideSandbox(str(exc)) from None
    if not any(prefix.contains(uri) for prefix in allowed):
        listed = ", ".join(str(p) for p in allowed) or "none configured (OPDWEB_CHECKPOINT_URIS)"
        raise OutsideSandbox(f"{value!r} is outside the checkpoint stores ({listed})")
    if not uri.path:
        raise OutsideSandbox(f"{value!r} names a whole bucket; name the checkpoint's prefix in it")
    return str(uri)


def confine_model(value: str) -> str:
    """A checkpoint reference inside the sandbox: an ``s3://`` URI under an allowed prefix
    (the worker fetches it), a checkpoint folder under the model roots (its real path), or a
    hub id where allowed.  Nothing here opens a file: existence and ``config.json`` are
    looked up, the content is read by a worker (the ``describe`` job)."""
    if checkpoint_uri.is_remote(value):
        return confine_uri(value)
    given = Path(value)
    if _HUB_ID.match(value) and not any((root / given).exists() for root in settings.OPDWEB_MODEL_ROOTS):
        if settings.OPDWEB_ALLOW_HUB:
            return value
        raise OutsideSandbox(f"{value!r} looks like a hub id, and this installation loads models only from its "
                             "model roots (an operator can set OPDWEB_ALLOW_HUB)")
    real = _resolve(value, settings.OPDWEB_MODEL_ROOTS, "model")
    if not (real / "config.json").is_file():
        raise OutsideSandbox(f"{value!r} is not a checkpoint directory (no config.json)")
    return str(real)


def confine_data(value: str) -> str:
    real = _resolve(value, settings.OPDWEB_DATA_ROOTS, "data")
    if not real.is_file():
        raise OutsideSandbox(f"{value!r} is not a file")
    return str(real)


def run_dir(job) -> Path:
    """The job's own directory for what it writes (training checkpoints): the same for every
    attempt of the job, so a requeued attempt resumes there, and named by the job's creation
    time too, so a job of a reset database never finds another's checkpoints."""
    return settings.RUNS_DIR / f"job-{job.pk}-{job.created_at:%Y%m%dT%H%M%S%f}"


def product_values(job) -> dict:
    """What the product fills in for the worker, for the fields a schema marks ``product``:
    the shared cache of BF16 references and KV scales, and the job's run directory."""
    return {"cache_dir": str(settings.REFERENCE_CACHE_DIR), "out": str(run_dir(job))}


def confine(config_model: type[BaseModel], config: dict, *, product: dict | None = None) -> dict:
    """``config`` with each path field resolved inside its roots; product fields take the
    values in ``product`` (the worker's) and may not be set by the submitter.  Raises
    :class:`Refused` naming every field outside the sandbox."""
    out, problems = dict(config), []
    for name, field in config_model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        rule, value = extra.get("sandbox"), out.get(name)
        try:
            if rule == "product":
                if value is not None and (product is None or value != product.get(name)):
                    raise OutsideSandbox("is set by the product, not by a job config")
                if product is not None and name in product:
                    out[name] = product[name]
            elif rule == "model" and isinstance(value, str):
                out[name] = confine_model(value)
            elif rule == "data" and isinstance(value, str):
                if not any(fnmatch.fnmatchcase(value, pattern) for pattern in extra.get("builtin", ())):
                    out[name] = confine_data(value)
        except OutsideSandbox as exc:
            problems.append({"field": name, "message": str(exc)})
    if problems:
        raise Refused("; ".join(f"{p['field']}: {p['message']}" for p in problems), details=problems)
    return out
