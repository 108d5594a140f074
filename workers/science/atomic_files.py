"""Files and folders that appear whole or not at all, however many processes write them at once.

Each writer writes its own temporary file beside the target (a unique name, so two writers
never truncate or rename each other's) and renames it over the target; the last rename wins
and a reader never sees half a file.  A folder (a checkpoint) is written the same way, beside
its target, and renamed into place."""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


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


def write_folder_atomically(target: Path, write: Callable[[Path], T]) -> T:
    """Call ``write(work)`` on a fresh folder beside ``target``, then put it in ``target``'s
    place (an existing ``target`` replaced), readable by other users (a worker's: mkdtemp's
    0700 would hide it); returns what ``write`` returned.  A failed write leaves nothing."""
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        result = write(work)
        work.chmod(0o755)
        for path in work.iterdir():
            path.chmod(0o644)
        if target.exists():
            shutil.rmtree(target)
        os.replace(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return result


__all__ = ["write_atomically", "write_folder_atomically"]
