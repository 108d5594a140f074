"""`make test` runs the suite on two pytest-xdist workers (``-n 2 --dist loadfile``): while
one worker waits on its Celery worker, daphne or Chromium, the other uses the CPU.

Loaded with ``-p tests.parallel`` (``pyproject.toml``), so it runs before pytest-django
imports the settings. Each worker gets what a deployment of its own would have:

- its own test database (pytest-django adds ``_gw<n>`` to the name);
- its own Redis database, and with it its own channel prefix (``opdweb.deployment.channel_prefix``
  names the Redis database), since a session-wide fixture flushes it and pub/sub channels
  are shared between Redis databases;
- its own data directory (job run folders are named by job id, which each test database
  counts from 1; the toy pair is copied there).

Every test run also gets a runtime folder (``XDG_RUNTIME_DIR``, where the embedded
PostgreSQL wheel keeps its lock files and Chromium its dconf), ``test/run`` in the data
directory, set before xdist starts its workers (they inherit it), unless the environment
names one: else the first embedded PostgreSQL a test starts would pick one inside that
test's own temporary data, and later servers and browsers would make it again after the
test removed it.  Outside xdist, and in xdist's
controller, nothing else changes."""
from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

from opdweb.launcher import data_dir

REDIS_DATABASES = 16  # Redis's default `databases`


def worker_redis_url(url: str, worker: int) -> str:
    """The base URL's database moved by ``worker``, kept within Redis's 16 databases."""
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    number = base + worker if base + worker < REDIS_DATABASES else base - worker
    return urlunsplit(parts._replace(path=f"/{number}"))


def worker_number() -> int | None:
    name = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1", ... set before pytest starts there
    return int(name.removeprefix("gw")) if name else None


def configure_worker() -> None:
    if "XDG_RUNTIME_DIR" not in os.environ:
        runtime = data_dir() / "test" / "run"
        runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    worker = worker_number()
    if worker is None:
        return
    if os.environ.get("REDIS_URL"):
        os.environ["REDIS_URL"] = worker_redis_url(os.environ["REDIS_URL"], worker)
    os.environ["OPDWEB_DATA_DIR"] = str(data_dir() / f"test-gw{worker}")


configure_worker()
