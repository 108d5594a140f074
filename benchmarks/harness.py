"""What the trace benchmarks share: Django set up on a throwaway database made and dropped
here (``--database``, default ``opdweb_bench``; never the test suite's), a team with a
logged-in user, a real daphne serving the app on that database, GETs on a keep-alive
connection, percentiles."""
from __future__ import annotations

import contextlib
import http.client
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opdweb.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402


@contextlib.contextmanager
def bench_database(name: str):
    """Create the database ``name`` with the schema, yield, drop it."""
    from django.core.management import call_command
    from django.test.utils import setup_databases, teardown_databases

    connection.settings_dict["TEST"]["NAME"] = name
    old = setup_databases(verbosity=0, interactive=False)
    try:
        call_command("check", verbosity=0)
        yield
    finally:
        connection.close()
        teardown_databases(old, verbosity=0)


def team_and_user():
    """A team, an admin of it, and a session cookie for that user."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from opdweb.teams.models import Membership, Role, Team

    team = Team.objects.create(name="bench", slug="bench")
    user = get_user_model().objects.create_user("bench", password="bench-password")
    Membership.objects.create(team=team, user=user, role=Role.ADMIN)
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.create()
    return team, user, f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


def make_job(team, name: str, state: str = "running"):
    from opdweb.jobs.models import Job

    return Job.objects.create(team=team, kind="selftest", name=name, config={}, state=state)


def database_url(name: str | None = None, scheme: str = "postgres") -> str:
    """A URL of the server Django uses, for the database ``name`` (default: the bench
    database Django is on now)."""
    db = connection.settings_dict
    host = quote(db["HOST"], safe="") if db["HOST"].startswith("/") else db["HOST"]
    port = f":{db['PORT']}" if db.get("PORT") else ""
    auth = db["USER"] + (f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else "")
    return f"{scheme}://{auth}@{host}{port}/{name or db['NAME']}"


def child_env() -> dict:
    """Environment for child processes: this (bench) database, the same Redis."""
    from django.conf import settings

    # The same deployment as this process, whose prefix was made from the database it started on.
    return {**os.environ, "DATABASE_URL": database_url(), "CHANNEL_PREFIX": settings.CHANNEL_PREFIX,
            "PYTHONUNBUFFERED": "1"}


@contextlib.contextmanager
def daphne():
    """A real daphne on a free loopback port, on the bench database; yields host:port."""
    from opdweb.embedded_servers import free_port, reachable

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "opdweb.web_server", "-b", "127.0.0.1", "-p", str(port),
                               "opdweb.asgi:application"],
                              env=child_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not reachable("127.0.0.1", port):
            if time.time() > deadline or server.poll() is not None:
                raise RuntimeError("daphne did not start")
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=20)


def http_get(conn: http.client.HTTPConnection, path: str, headers: dict) -> bytes:
    """GET ``path`` on a keep-alive connection; the body of a 200, else RuntimeError.  A server
    closes a connection left idle (daphne after 60 s, while the other store is measured): the
    request then finds it closed, and is sent once more on a new one."""
    for attempt in (1, 2):
        try:
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            body = response.read()
            break
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            conn.close()  # the next request opens a new connection
            if attempt == 2:
                raise
    if response.status != 200:
        raise RuntimeError(f"GET {path}: {response.status} {body[:300]!r}")
    return body


def load() -> str:
    """The 1/5/15-minute load averages: how shared the machine was during a run."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def percentile(values, q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]
