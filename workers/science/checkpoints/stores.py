"""One interface over where files are kept: :func:`store_at` gives the :class:`Store` of a
URI, a local directory (:mod:`.local`) or an S3 prefix (:mod:`.s3`), as MLflow's artifact
repositories are one class per scheme.

Every key is relative to the store's root and checked by :func:`.uri.clean_key`, so no key
leads outside the root a config or a setting named.
"""
from __future__ import annotations

from typing import BinaryIO, ContextManager, Protocol

from .files import StoredFile, TooLarge
from .uri import StoreURI, parse

__all__ = ["Store", "StoredFile", "TooLarge", "store_at"]


class Store(Protocol):
    uri: StoreURI

    def list(self, prefix: str = "") -> list[StoredFile]:
        """Every file at or below ``prefix`` (recursive), sorted by key; [] when none."""

    def open(self, key: str) -> ContextManager[BinaryIO]:
        """The file's bytes, streamed; raises FileNotFoundError when there is none."""

    def write(self, key: str, stream: BinaryIO, *, max_bytes: int | None = None) -> int:
        """Store ``stream`` at ``key`` whole or not at all (a reader never sees half a file);
        returns its size.  Raises :class:`.files.TooLarge` past ``max_bytes``."""

    def delete(self, key: str) -> None:
        """Remove the file at ``key`` (nothing when there is none)."""


def store_at(uri: str | StoreURI) -> Store:
    """The store of ``uri``: ``s3://bucket/prefix`` or a local directory."""
    parsed = parse(uri) if isinstance(uri, str) else uri
    if parsed.scheme == "s3":
        from .s3 import S3Store

        return S3Store(parsed)
    from .local import LocalStore

    return LocalStore(parsed)
