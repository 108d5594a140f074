"""Shared fixtures: real processes (Celery worker, ASGI server) against the test database.

Tests that talk to another process use ``transactional_db`` so what they write is
committed and visible there.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

import pytest
import redis as redis_lib
from django.conf import settings
from django.db import connection, connections

from opdweb.embedded_servers import free_port, reachable
from tests.web.factories import MembershipFactory, TeamFactory, UserFactory

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_TOY_PAIR = ROOT / "tests" / "science" / "fixtures" / "toy-test"


@pytest.fixture(scope="session", autouse=True)
def clean_redis():
    """Queues and channel-layer keys left by an earlier run would be delivered to this one."""
    redis_lib.Redis.from_url(settings.REDIS_URL).flushdb()


def database_url() -> str:
    db = connection.settings_dict
    host = quote(db["HOST"], safe="") if db["HOST"].startswith("/") else db["HOST"]
    port = f":{db['PORT']}" if db.get("PORT") else ""
    auth = db["USER"] + (f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{host}{port}/{db['NAME']}"


@pytest.fixture
def service_env(transactional_db) -> dict:
    """Environment for child processes: the test database, fast heartbeats."""
    return {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        # The test database's name differs from the one this process's settings were
        # made from: the children must publish and listen under this deployment's prefix.
        "CHANNEL_PREFIX": settings.CHANNEL_PREFIX,
        "SECRET_KEY": settings.SECRET_KEY,
        "JOB_HEARTBEAT_SECONDS": "0.3",
        "JOB_STALE_SECONDS": "2",
        "CONN_MAX_AGE": "0",
        "PYTHONUNBUFFERED": "1",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
    }


class Process:
    """A child process with its output in a log file, shown when a test fails."""

    started: list[Process] = []  # every one a test started, for wait_for_children_to_disconnect

    def __init__(self, name: str, command: list[str], env: dict, log_dir: Path, stacks_signal: int | None = None):
        self.name = name
        self.stacks_signal = stacks_signal  # asks the process to print every thread's stack
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        Process.started.append(self)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.alive():
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=20)

    def stop(self) -> None:
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()

    def print_stacks(self) -> bool:
        if self.stacks_signal is None or not self.alive():
            return False
        os.kill(self.proc.pid, self.stacks_signal)
        return True

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text()


# The ceiling of a wait for an event of a real process (a worker's job, a restart, a delivery):
# generous enough for a machine at load 15; each wait ends at its event, so a quiet machine
# never reaches it.
CEILING_S = 600


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1,
             process: Process | Sequence[Process] | None = None):
    """Poll ``predicate`` until it is truthy; a watched process that exits, or the timeout,
    fails the test with the watched processes' output."""
    watched = [] if process is None else [process] if isinstance(process, Process) else list(process)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        for proc in watched:
            if not proc.alive():
                raise AssertionError(f"{proc.name} exited while waiting for {what}:\n{proc.output()[-4000:]}")
        time.sleep(interval)
    if any([proc.print_stacks() for proc in watched]):
        time.sleep(2)  # for the stacks to be written
    detail = "".join(f"\n{proc.name} output:\n{proc.output()[-8000:]}" for proc in watched)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")


def wait_for_redis_on_disk(client, timeout: float = 120) -> None:
    """Until what ``client``'s Redis holds is on its disk: an append-only file rewritten from
    memory (BGREWRITEAOF) and fsynced, instead of a pause for ``appendfsync everysec``."""
    client.bgrewriteaof()  # forks the rewrite at once, or schedules it: either shows in INFO from here on

    def rewritten():
        info = client.info("persistence")
        return (not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]
                and info["aof_last_bgrewrite_status"] == "ok")

    wait_for(rewritten, timeout, "Redis to write its append-only file", interval=0.05)


def wait_for_children_to_disconnect(timeout: float = 15) -> None:
    """A killed child's database session ends a moment after the child; wait for it so
    the test database can be flushed or dropped. While another fixture's process still
    runs (a worker, when the server's fixture is torn down first), its own teardown waits."""
    Process.started[:] = [proc for proc in Process.started if proc.alive()]
    if Process.started:
        return

    def alone():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return cursor.fetchone()[0] == 0

    try:
        wait_for(alone, timeout, "child processes' database sessions to end")
    except AssertionError:
        pass  # the database's own message, at teardown, says who is still there


@pytest.fixture
def start_worker(service_env, tmp_path):
    """Start a real Celery worker (solo pool, both queues unless told); waits until it reports in."""
    from opdweb.health.models import WorkerPresence

    started: list[Process] = []

    def start(name: str = "w1", queues: str = "gpu,cpu", **extra_env: str) -> Process:
        command = [sys.executable, "-m", "celery", "-A", "opdweb.celery_app", "worker", "-Q", queues,
                   "--pool", "solo", "-n", f"{name}@test", "--loglevel", "INFO", "--without-mingle", "--without-gossip"]
        # Celery prints every thread's stack on SIGUSR1: a test that times out shows where a worker was.
        proc = Process(f"worker-{name}", command, {**service_env, **extra_env}, tmp_path, stacks_signal=signal.SIGUSR1)
        started.append(proc)
        wait_for(lambda: WorkerPresence.objects.filter(name=f"{name}@test", pid=proc.proc.pid).exists(), 60,
                 f"worker {name} to report in", process=proc)
        return proc

    yield start
    for proc in started:
        proc.stop()
    wait_for_children_to_disconnect()


@pytest.fixture
def start_asgi_server(service_env, tmp_path):
    """Start a real daphne serving the app on a free loopback port (extra environment
    variables as keywords); returns its ``host:port``."""
    started: list[Process] = []

    def start(**extra_env: str) -> str:
        port = free_port()
        command = [sys.executable, "-m", "opdweb.web_server", "-b", "127.0.0.1", "-p", str(port),
                   "opdweb.asgi:application"]
        proc = Process(f"daphne-{len(started)}", command, {**service_env, **extra_env}, tmp_path)
        started.append(proc)
        wait_for(lambda: reachable("127.0.0.1", port), 60, "daphne to listen", process=proc)
        return f"127.0.0.1:{port}"

    yield start
    for proc in started:
        proc.stop()
    wait_for_children_to_disconnect()


@pytest.fixture
def asgi_server(start_asgi_server):
    """A real daphne serving the app on a free loopback port; yields its base URL."""
    return start_asgi_server()


@pytest.fixture
def member(db):
    """A user who is a member of a team: ``(user, team)``."""
    m = MembershipFactory()
    return m.user, m.team


@pytest.fixture
def tracking(member):
    """The MLflow endpoints as a trainer reaches them, with a write token of ``member``'s team."""
    from opdweb.tokens.actions import do_create_token
    from tests.web.test_mlflow_endpoints import Tracking

    user, team = member
    return Tracking(do_create_token(user=user, team=team, name="trainer", can_write=True)[1])


@pytest.fixture
def run_id(tracking):
    """An MLflow run started through ``tracking``."""
    return tracking.start_run(run_name="r1")


@pytest.fixture
def outsider(db):
    """A user in another team."""
    return MembershipFactory(team=TeamFactory()).user


@pytest.fixture
def make_user(db):
    def make(team, role):
        return MembershipFactory(team=team, user=UserFactory(), role=role).user

    return make


@pytest.fixture
def page(monkeypatch):
    """A fresh Chromium page (1280 x 900), closed after the test; the test fails if any page
    it opened reported a Content-Security-Policy violation (an inline script, a foreign source)."""
    # Playwright's sync API keeps an event loop on this thread; the ORM calls the tests
    # make between page actions are ordinary blocking calls, not async code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "1")
    from playwright.sync_api import sync_playwright

    from tests.web.browser import ARGS, CHROMIUM

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        opened = context.new_page()
        violations: list[str] = []
        opened.on("console", lambda message: violations.append(message.text)
                  if "Content Security Policy" in message.text else None)
        opened.csp_violations = violations  # type: ignore[attr-defined]
        yield opened
        # With Playwright's loop on this thread, the ORM opened connections of its own
        # for this context; close them so the test database can be dropped.
        connections.close_all()
        browser.close()
        assert violations == [], f"the pages broke their Content-Security-Policy: {violations}"


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    """As in the science tests: torch in this process on one thread (science called
    in-process, a toy build), so a loaded machine is not oversubscribed."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def toy_student() -> str:
    """The toy student where ``make run`` builds it (under the data directory's model root):
    a copy of the shipped test pair, ``tests/science/fixtures/toy-test``, which is what
    ``build_toy_models("test", ...)`` builds (its manifest carries today's recipe; the bits
    are the ones every science test uses).  Built here, once, only while the shipped pair is
    stale against a changed recipe."""
    from workers.science.toy import build_toy_models, current_build

    out = settings.DATA_DIR / "toy" / "test"
    if current_build("test", SHIPPED_TOY_PAIR):
        shutil.rmtree(out, ignore_errors=True)
        # opdweb_kv_scales: a cache the tests write beside a checkpoint, not part of the pair
        shutil.copytree(SHIPPED_TOY_PAIR, out, ignore=shutil.ignore_patterns("opdweb_kv_scales", ".gitignore"))
    manifest = build_toy_models("test", out)
    assert manifest["cached"] or not current_build("test", SHIPPED_TOY_PAIR), manifest
    return str(out / "student")
