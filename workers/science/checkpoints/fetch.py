"""A checkpoint reference on local disk, wherever it is kept: a local path is used where it
is, an ``s3://`` prefix is checked out of the worker's :class:`~.cache.CheckpointCache`."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from .cache import CheckpointCache, Progress
from .uri import parse


@contextmanager
def local_checkpoint(value: str, cache: CheckpointCache, *, digest: str | None = None,
                     progress: Progress | None = None) -> Iterator[str]:
    """The local folder of the checkpoint ``value`` names, for the block's duration."""
    uri = parse(value)
    if uri.scheme != "s3":
        yield value
        return
    with cache.checkout(uri, digest, progress) as folder:
        yield str(folder)
