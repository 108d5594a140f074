"""The worker's checkpoint cache (workers/science/checkpoints/cache.py), on a store that is a
local directory (the S3 store is held to the same contract in test_stores.py): content
addressed by digest, one download when several processes want the same checkpoint, a
partial or corrupt download never used, least recently used evicted first but never one a
job holds, a checkpoint larger than the cache refused."""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from workers.science.checkpoints import cache as cache_module
from workers.science.checkpoints.cache import CheckpointCache, CheckpointTooLarge, DigestMismatch
from workers.science.checkpoints.local import LocalStore
from workers.science.checkpoints.uri import parse

MiB = 2**20


def make_checkpoint(root: Path, name: str, weight_bytes: int) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "qwen2"}')
    (folder / "model.safetensors").write_bytes(name.encode() * (weight_bytes // len(name)))
    return folder


def hand_digest(folder: Path) -> str:
    """The content digest written out by hand: name and sha256 of config.json and each
    weights file, in name order."""
    lines = b""
    for f in sorted([folder / "config.json", *folder.glob("*.safetensors")]):
        lines += f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).hexdigest().encode() + b"\n"
    return hashlib.sha256(lines).hexdigest()


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and p.name != cache_module.LAST_USED}


@pytest.fixture
def store_dir(tmp_path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def cache(tmp_path) -> CheckpointCache:
    return CheckpointCache(tmp_path / "cache", 10 * MiB)


@pytest.fixture
def no_pause(monkeypatch):
    monkeypatch.setattr(cache_module, "RETRY_PAUSE_S", 0.0)


def test_a_fetch_lands_at_its_digest_with_the_same_bytes(store_dir, cache):
    source = make_checkpoint(store_dir, "student", MiB)
    seen = []
    with cache.checkout(parse(str(source)), progress=lambda done, total: seen.append((done, total))) as folder:
        assert folder == cache.root / hand_digest(source)
        assert files_of(folder) == files_of(source)
    size = sum(len(b) for b in files_of(source).values())
    assert seen[-1] == (size, size) and all(done <= size for done, _ in seen)
    assert os.listdir(cache.root / ".partial") == []


def test_a_held_checkpoint_is_used_without_asking_the_store(store_dir, cache):
    source = make_checkpoint(store_dir, "student", MiB)
    digest = hand_digest(source)
    with cache.checkout(parse(str(source)), digest):
        pass
    for f in source.iterdir():
        f.unlink()  # the store is gone (or down): the cache still serves the same weights
    with cache.checkout(parse(str(source)), digest) as folder:
        assert (folder / "model.safetensors").read_bytes().startswith(b"student")


def test_content_that_is_not_the_registered_digest_is_refused_and_not_kept(store_dir, cache):
    source = make_checkpoint(store_dir, "student", MiB)
    with pytest.raises(DigestMismatch, match="changed in the store"):
        with cache.checkout(parse(str(source)), "0" * 64):
            pass
    assert cache.entries() == [] and os.listdir(cache.root / ".partial") == []


def test_a_checkpoint_larger_than_the_cache_is_refused_with_both_sizes(store_dir, tmp_path):
    source = make_checkpoint(store_dir, "student", 3 * MiB)
    small = CheckpointCache(tmp_path / "small", 2 * MiB)
    with pytest.raises(CheckpointTooLarge, match=r"is 3\.0 MiB, larger than this worker's whole checkpoint cache "
                                                  r"\(2\.0 MiB\)"):
        with small.checkout(parse(str(source))):
            pass
    assert small.entries() == []


def flaky(failures: int):
    """LocalStore.open that breaks off the first ``failures`` reads of weights half way."""
    real, left = LocalStore.open, [failures]

    def open_(store, key):
        if left[0] > 0 and key.endswith(".safetensors"):
            left[0] -= 1
            return _breaks_half_way(real(store, key))
        return real(store, key)

    return open_


class _breaks_half_way:
    def __init__(self, inner):
        self.inner = inner

    def __enter__(self):
        fh = self.inner.__enter__()
        self.half = os.fstat(fh.fileno()).st_size // 2
        self.fh = fh
        return self

    def read(self, size=-1):
        if self.fh.tell() >= self.half:
            raise ConnectionResetError("the store went away mid-file")
        return self.fh.read(min(size if size > 0 else self.half, self.half - self.fh.tell()))

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)


def test_a_download_broken_off_is_retried_and_the_result_is_whole(store_dir, cache, monkeypatch, no_pause):
    source = make_checkpoint(store_dir, "student", MiB)
    monkeypatch.setattr(LocalStore, "open", flaky(cache_module.ATTEMPTS - 1))
    with cache.checkout(parse(str(source)), hand_digest(source)) as folder:
        assert files_of(folder) == files_of(source)


def test_a_download_that_keeps_failing_leaves_nothing_to_use(store_dir, cache, monkeypatch, no_pause):
    source = make_checkpoint(store_dir, "student", MiB)
    monkeypatch.setattr(LocalStore, "open", flaky(cache_module.ATTEMPTS))
    with pytest.raises(ConnectionResetError):
        with cache.checkout(parse(str(source))):
            pass
    assert cache.entries() == [] and os.listdir(cache.root / ".partial") == []


def test_the_least_recently_used_goes_first_and_a_held_one_never(store_dir, tmp_path):
    cache = CheckpointCache(tmp_path / "cache", 5 * MiB)  # two 2-MiB checkpoints fit, three do not
    a, b, c = (make_checkpoint(store_dir, name, 2 * MiB) for name in ("aaaa", "bbbb", "cccc"))

    def checkout(source):
        return cache.checkout(parse(str(source)), hand_digest(source))

    for source in (a, b, a):  # a used again after b: b is the least recently used
        with checkout(source):
            time.sleep(0.01)
    with checkout(c):
        pass
    assert {p.name for p in cache.entries()} == {hand_digest(a), hand_digest(c)}

    with checkout(a):  # a held, c the least recent: c goes, a stays
        with checkout(b):
            assert {p.name for p in cache.entries()} == {hand_digest(a), hand_digest(b)}
            with pytest.raises(CheckpointTooLarge, match="in use by running jobs"):
                with checkout(c):  # a and b both held: no room
                    pass
    assert cache.used_bytes() <= cache.max_bytes


def _checkout_in_child(root: str, source: str, digest: str, opened: str, out: str) -> None:
    real = LocalStore.open

    def slow_open(store, key):
        with open(opened, "a") as log:
            log.write(f"{os.getpid()} {key}\n")
        time.sleep(0.3)  # long enough that every process asks while the first downloads
        return real(store, key)

    LocalStore.open = slow_open  # type: ignore[method-assign]
    cache = CheckpointCache(root, 10 * MiB)
    with cache.checkout(parse(source), digest) as folder:
        Path(out).write_text(str(folder))


def test_several_processes_wanting_one_checkpoint_download_it_once(store_dir, tmp_path):
    source = make_checkpoint(store_dir, "student", MiB)
    opened = tmp_path / "opened.log"
    ctx = multiprocessing.get_context("fork")
    children = [ctx.Process(target=_checkout_in_child, args=(str(tmp_path / "cache"), str(source),
                                                             hand_digest(source), str(opened),
                                                             str(tmp_path / f"out-{i}")))
                for i in range(4)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    assert len(opened.read_text().splitlines()) == 2  # config.json and the weights, by one process
    got = {(tmp_path / f"out-{i}").read_text() for i in range(4)}
    assert got == {str(tmp_path / "cache" / hand_digest(source))}


def _fetch_forever(root: str, source: str, started: str) -> None:
    real = LocalStore.open

    def stuck_open(store, key):
        if key.endswith(".safetensors"):
            Path(started).touch()
            time.sleep(600)
        return real(store, key)

    LocalStore.open = stuck_open  # type: ignore[method-assign]
    with CheckpointCache(root, 10 * MiB).checkout(parse(source)):
        pass


@pytest.mark.faults
def test_a_worker_killed_mid_fetch_leaves_no_partial_in_use(store_dir, tmp_path):
    source = make_checkpoint(store_dir, "student", MiB)
    started = tmp_path / "started"
    child = multiprocessing.get_context("fork").Process(
        target=_fetch_forever, args=(str(tmp_path / "cache"), str(source), str(started)))
    child.start()
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists()
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    cache = CheckpointCache(tmp_path / "cache", 10 * MiB)
    assert len(os.listdir(cache.root / ".partial")) == 1 and cache.entries() == []  # what the kill left
    with cache.checkout(parse(str(source)), hand_digest(source)) as folder:  # the lock died with it
        assert files_of(folder) == files_of(source)
    assert os.listdir(cache.root / ".partial") == []


@pytest.mark.faults
def test_a_fetch_from_s3_survives_the_store_killed_between_files(s3_server, s3_bucket, tmp_path, monkeypatch):
    """The real store, kill -9 after the first file and started again a second later: the
    next file's download is retried until the store answers, and the checkpoint is whole."""
    from workers.science.checkpoints.stores import store_at

    source = make_checkpoint(tmp_path / "src", "student", 2 * MiB)
    uri = f"s3://{s3_bucket}/student"
    for f in sorted(source.iterdir()):
        with f.open("rb") as fh:
            store_at(uri).write(f.name, fh)
    # 5 + 10 + 15 s: a store killed -9 serves again in about 4 s
    monkeypatch.setattr(cache_module, "RETRY_PAUSE_S", 5.0)
    first_file, killed = threading.Event(), threading.Event()

    def kill_after_the_first_file(done, total):
        if not first_file.is_set():
            first_file.set()
            killed.wait(30)

    cache = CheckpointCache(tmp_path / "cache", 10 * MiB)
    got: dict = {}

    def fetch():
        try:
            with cache.checkout(parse(uri), hand_digest(source), progress=kill_after_the_first_file) as folder:
                got["files"] = files_of(folder)
        except Exception as exc:  # noqa: BLE001 - reported below
            got["error"] = exc

    # The fetch runs in a thread; the store is restarted from this one (a child started from a
    # thread that ends gets SIGTERM: the supervisor's parent-death signal is per thread).
    fetcher = threading.Thread(target=fetch)
    fetcher.start()
    try:
        assert first_file.wait(60)
        s3_server.kill()
        killed.set()
        time.sleep(1.0)
    finally:
        s3_server.start()
    fetcher.join(120)
    assert "error" not in got, got.get("error")
    assert got["files"] == files_of(source)
    assert os.listdir(cache.root / ".partial") == []
