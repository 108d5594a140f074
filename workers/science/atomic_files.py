"""Files that appear whole or not at all, however many processes write them at once.

Each writer writes its own temporary file beside the target (a unique name, so two writers
never truncate or rename each other's) and renames it over the target; the last rename wins
and a reader never sees half a file."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomically(path: Path, write: Callable[[Path], object], suffix: str = "") -> None:
    """Call ``write(tmp)`` on a fresh temporary path beside ``path``, then rename it to ``path``.

    ``suffix`` ends the temporary name, for writers that choose a format by it (numpy's
    ``savez`` appends ``.npz`` to a name without it). A failed write leaves no temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{suffix}")
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


__all__ = ["write_atomically"]
