"""The worker's local cache of checkpoints fetched from a store.

Content-addressed: a complete checkpoint lives at ``<root>/<digest>/`` and is never
changed.  A fetch downloads into ``<root>/.partial/`` and is moved into place (one atomic
rename) only after its content digest was computed from the downloaded bytes and matched
the expected one, so a partial or corrupt download is never used.  One fetch per
checkpoint at a time: concurrent jobs wanting the same one wait on a lock file and then
find it complete.  The cache is bounded: before a download, the least recently used
checkpoints that no job holds are evicted until the new one fits, and a checkpoint larger
than the whole cache is refused with a message naming both sizes.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from ..fingerprint import checkpoint_digest, checkpoint_digest_with_trainer_state
from .stores import Store, store_at
from .uri import StoreURI

#: ``progress(done_bytes, total_bytes)`` while a fetch downloads.
Progress = Callable[[int, int], None]
#: Attempts per file before a fetch gives up (a store that restarts mid-download is retried).
ATTEMPTS = 4
RETRY_PAUSE_S = 1.0
LAST_USED = ".last-used"


class CheckpointTooLarge(ValueError):
    pass


class DigestMismatch(ValueError):
    """What was downloaded is not the checkpoint the reference names (changed in the store)."""


class CheckpointCache:
    def __init__(self, root: str | Path, max_bytes: int):
        self.root = Path(root)
        self.max_bytes = int(max_bytes)
        for sub in (".partial", ".locks"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    # -- what is held ---------------------------------------------------------------------
    def path_of(self, digest: str) -> Path:
        return self.root / digest

    def entries(self) -> list[Path]:
        return [p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")]

    def used_bytes(self) -> int:
        return sum(_size(p) for p in self.entries())

    # -- the one way in ------------------------------------------------------------------
    @contextmanager
    def checkout(self, uri: StoreURI, digest: str | None = None, progress: Progress | None = None) -> Iterator[Path]:
        """The local folder of the checkpoint at ``uri`` (fetched if not held), kept from
        eviction while the block runs.  With ``digest``, what is fetched must have it, and a
        checkpoint already held is used without asking the store."""
        key = digest or "uri-" + hashlib.sha256(str(uri).encode()).hexdigest()[:32]
        held = None
        try:
            with _locked(self.root / ".locks" / f"{key}.fetch", fcntl.LOCK_EX):
                if digest is not None:
                    held = self._hold(self.path_of(digest))
                if held is None:
                    found = self._fetch(store_at(uri), digest, progress)
                    held = self._hold(found)
                    if held is None:  # evicted between the rename and the hold: cannot happen twice
                        raise FileNotFoundError(f"{found} was evicted as it was fetched; run the job again")
            folder, _ = held
            (folder / LAST_USED).touch()
            yield folder
        finally:
            if held is not None:
                _release(held[1])

    def _hold(self, folder: Path) -> tuple[Path, int] | None:
        """A shared hold on ``folder`` (eviction skips it) if it is in the cache, else None."""
        fd = _lock_fd(self.root / ".locks" / f"{folder.name}.use", fcntl.LOCK_SH)
        if folder.is_dir():  # checked under the hold: an eviction renames it under an exclusive one
            return folder, fd
        _release(fd)
        return None

    # -- fetching -----------------------------------------------------------------------------
    def _fetch(self, store: Store, digest: str | None, progress: Progress | None) -> Path:
        files = store.list()
        if not files:
            raise FileNotFoundError(f"{store.uri}: no files there (a checkpoint is a folder with config.json and "
                                    "weights)")
        total = sum(f.size for f in files)
        if total > self.max_bytes:
            raise CheckpointTooLarge(
                f"{store.uri} is {_gib(total)}, larger than this worker's whole checkpoint cache "
                f"({_gib(self.max_bytes)}); raise OPDWEB_CHECKPOINT_CACHE_BYTES on the worker or use a smaller "
                "checkpoint")
        self._clear_abandoned_partials()
        self._make_room(total)
        partial = self.root / ".partial" / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        partial.mkdir()
        try:
            done = 0
            for f in files:
                target = partial / f.key
                target.parent.mkdir(parents=True, exist_ok=True)
                _download(store, f.key, target)
                done += f.size
                if progress is not None:
                    progress(done, total)
            got = checkpoint_digest(partial)
            if got is None:
                raise FileNotFoundError(f"{store.uri}: not a checkpoint folder")
            # A digest registered before trainer state was left out names the same content (the
            # trainer state, as large as the weights or more, is read only to check that).
            if digest is not None and digest != got and digest != checkpoint_digest_with_trainer_state(partial):
                raise DigestMismatch(f"{store.uri} now has content {got[:12]}, not the registered {digest[:12]}: "
                                     "the checkpoint changed in the store; register it again")
            final = self.path_of(got)
            try:
                os.rename(partial, final)
            except OSError:
                if not final.is_dir():
                    raise
                shutil.rmtree(partial)  # fetched under another URI meanwhile: the same bytes
            return final
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise

    def _make_room(self, needed: int) -> None:
        """Evict least recently used checkpoints no job holds until ``needed`` bytes fit."""
        entries = sorted(self.entries(), key=_last_used)
        used = sum(_size(p) for p in entries)
        for entry in entries:
            if used + needed <= self.max_bytes:
                return
            lock = self.root / ".locks" / f"{entry.name}.use"
            try:
                fd = _lock_fd(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a job holds it
            try:
                size = _size(entry)
                doomed = self.root / ".partial" / f"evict-{uuid.uuid4().hex[:8]}"
                os.rename(entry, doomed)  # gone from the cache at once, then deleted
                shutil.rmtree(doomed, ignore_errors=True)
                used -= size
            finally:
                _release(fd)
        if used + needed > self.max_bytes:
            raise CheckpointTooLarge(f"the checkpoint cache ({_gib(self.max_bytes)}) holds {_gib(used)} in use by "
                                     f"running jobs; {_gib(needed)} more do not fit now")

    def _clear_abandoned_partials(self) -> None:
        """Partial downloads of processes that died (kill -9 mid-fetch) are removed."""
        for p in (self.root / ".partial").iterdir():
            pid = p.name.split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(p, ignore_errors=True)


def _download(store: Store, key: str, target: Path) -> None:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with store.open(key) as src, target.open("wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            return
        except FileNotFoundError:
            raise
        except Exception:  # noqa: BLE001 - a store restarting mid-download: try the file again
            target.unlink(missing_ok=True)
            if attempt == ATTEMPTS:
                raise
            time.sleep(RETRY_PAUSE_S * attempt)


def _lock_fd(path: Path, mode: int) -> int:
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _release(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


@contextmanager
def _locked(path: Path, mode: int) -> Iterator[None]:
    fd = _lock_fd(path, mode)
    try:
        yield
    finally:
        _release(fd)


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _last_used(path: Path) -> float:
    marker = path / LAST_USED
    return marker.stat().st_mtime if marker.exists() else path.stat().st_mtime


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
