"""One interface over where files are kept: :func:`store_at` gives the :class:`Store` of a
URI, a local directory (:mod:`.local`) or an S3 prefix (:mod:`.s3`), as MLflow's artifact
repositories are one class per scheme.

Every key is relative to the store's root and checked by :func:`.uri.clean_key`, so no key
leads outside the root a config or a setting named.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, ContextManager, Protocol

from .uri import StoreURI, parse


@dataclass(frozen=True)
class StoredFile:
    key: str  # relative to the store's root, "/"-separated
    size: int


class TooLarge(ValueError):
    """A write that went past its ``max_bytes``: nothing of it is kept."""


class Store(Protocol):
    uri: StoreURI

    def list(self, prefix: str = "") -> list[StoredFile]:
        """Every file at or below ``prefix`` (recursive), sorted by key; [] when none."""

    def open(self, key: str) -> ContextManager[BinaryIO]:
        """The file's bytes, streamed; raises FileNotFoundError when there is none."""

    def write(self, key: str, stream: BinaryIO, *, max_bytes: int | None = None) -> int:
        """Store ``stream`` at ``key`` whole or not at all (a reader never sees half a file);
        returns its size.  Raises :class:`TooLarge` past ``max_bytes``."""

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


class LimitedReader:
    """Reads ``stream`` and raises :class:`TooLarge` once more than ``max_bytes`` went by."""

    def __init__(self, stream: BinaryIO, max_bytes: int | None):
        self.stream, self.max_bytes, self.count = stream, max_bytes, 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.count += len(data)
        if self.max_bytes is not None and self.count > self.max_bytes:
            raise TooLarge(f"larger than the limit of {self.max_bytes} bytes")
        return data
