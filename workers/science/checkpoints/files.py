"""What every store hands back and checks: a file's key and size, the size limit, and the
error of a store out of reach."""
from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO


@dataclass(frozen=True)
class StoredFile:
    key: str  # relative to the store's root, "/"-separated
    size: int


class TooLarge(ValueError):
    """A write that went past its ``max_bytes``: nothing of it is kept."""


class StoreUnavailable(ConnectionError):
    """The store did not answer (down, restarting, cut off): a fetch may succeed later."""


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
