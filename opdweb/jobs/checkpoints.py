"""The worker's side of checkpoints by URI: before a job runs, each checkpoint its config
names by ``s3://`` URI is checked out of this worker's cache (fetched and verified if not
held; the fetch's progress shows on the job page), and the science sees a local folder.
Its result names the checkpoint by the URI again, never by this host's cache path.

A checkpoint that was described (registered) is fetched only if its content still has the
digest the product knows, so a job never measures other weights than the ones its
evidence names."""
from __future__ import annotations

import logging
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from django.conf import settings
from pydantic import BaseModel

from workers.science.checkpoints.cache import CheckpointCache
from workers.science.checkpoints.fetch import local_checkpoint
from workers.science.checkpoints.uri import is_remote
from workers.science.reporting import Reporter

log = logging.getLogger(__name__)

#: The digest the product knows of a checkpoint URI (None when never read), set by the app
#: that keeps checkpoint descriptions (opdweb.registry), so jobs need not import it.
KNOWN_DIGESTS: list[Callable[[str], str | None]] = []


def known_digest(uri: str) -> str | None:
    return next((d for lookup in KNOWN_DIGESTS if (d := lookup(uri)) is not None), None)


def cache() -> CheckpointCache:
    return CheckpointCache(settings.OPDWEB_CHECKPOINT_CACHE, settings.OPDWEB_CHECKPOINT_CACHE_BYTES)


def model_fields(config_model: type[BaseModel]) -> list[str]:
    out = []
    for name, field in config_model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if extra.get("sandbox") == "model":
            out.append(name)
    return out


@contextmanager
def checked_out(config_model: type[BaseModel], config: dict, reporter: Reporter) -> Iterator[tuple[dict, dict]]:
    """``config`` with each remote checkpoint replaced by its local folder, and the map from
    those folders back to the URIs, for the block's duration."""
    local, names = dict(config), {}
    with ExitStack() as stack:
        for field in model_fields(config_model):
            value = config.get(field)
            if not (isinstance(value, str) and is_remote(value)):
                continue

            def progress(done: int, total: int, uri: str = value) -> None:
                reporter.progress(done / total if total else 1.0,
                                  f"fetching {uri}: {done / 2**20:.1f} of {total / 2**20:.1f} MiB")

            started = time.monotonic()
            folder = stack.enter_context(local_checkpoint(value, cache(), digest=known_digest(value),
                                                          progress=progress))
            log.info("checkpoint %s: in this worker's cache as %s (%.1f s)", value, Path(folder).name,
                     time.monotonic() - started)
            local[field], names[folder] = folder, value
        yield local, names


def named_by_uri(value: Any, names: dict[str, str]) -> Any:
    """``value`` (a result's JSON) with every local folder of ``names`` (and paths below it)
    written as its URI."""
    if isinstance(value, dict):
        return {k: named_by_uri(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [named_by_uri(v, names) for v in value]
    if isinstance(value, str):
        for folder, uri in names.items():
            if value == folder or value.startswith(folder + "/"):
                return uri + value[len(folder):]
    return value
