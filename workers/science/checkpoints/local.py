"""A store that is a directory on this host."""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

from .files import LimitedReader, StoredFile
from .uri import StoreURI, clean_key


class LocalStore:
    def __init__(self, uri: StoreURI):
        self.uri = uri
        self.root = Path(uri.path)

    def _path(self, key: str) -> Path:
        key = clean_key(key)
        return self.root / key if key else self.root

    def list(self, prefix: str = "") -> list[StoredFile]:
        base = self._path(prefix)
        if base.is_file():
            return [StoredFile(clean_key(prefix), base.stat().st_size)]
        if not base.is_dir():
            return []
        out = []
        for path in base.rglob("*"):
            if path.is_file() and not path.is_symlink() and not path.name.startswith(".partial-"):
                out.append(StoredFile(path.relative_to(self.root).as_posix(), path.stat().st_size))
        return sorted(out, key=lambda f: f.key)

    @contextmanager
    def open(self, key: str) -> Iterator[BinaryIO]:
        path = self._path(key)
        if not path.is_file():
            raise FileNotFoundError(f"{self.uri.child(key)}: no such file")
        with path.open("rb") as fh:
            yield fh

    def write(self, key: str, stream: BinaryIO, *, max_bytes: int | None = None) -> int:
        path = self._path(key)
        if not clean_key(key):
            raise IsADirectoryError(f"{self.uri}: a file needs a key")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".partial-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(LimitedReader(stream, max_bytes), out, 1 << 20)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path.stat().st_size

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)
