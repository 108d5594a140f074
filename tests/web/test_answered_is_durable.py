"""An answered batch is a durable batch: ``runs/log-batch``, ``runs/log-metric`` and
``POST /api/runs/<id>/points`` commit with ``synchronous_commit`` on, so the 200 comes
only once the points' WAL is flushed (a PostgreSQL crash after the answer loses none).
The worker's own trace sink, which answers nobody, keeps the fast commit on the
transactions it owns (:mod:`opdweb.traces.batches`)."""
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from django.db import connection, transaction

from opdweb.traces.batches import write_points
from tests.web.factories import JobFactory
from tests.web.test_mlflow_endpoints import metric
from tests.web.test_run_points import key, log

pytestmark = pytest.mark.django_db


def commit_setting() -> str:
    """What the request's transaction will commit with (the test holds it open: the
    request ran inside the test's transaction, so a setting it made is still in force)."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


def test_an_answered_log_batch_waits_for_the_wal_flush(tracking, run_id):
    assert commit_setting() == "on"
    response = tracking.batch(run_id, metrics=[metric("train/loss", 0.5, step) for step in range(3)])
    assert response.status_code == 200, response.content
    assert commit_setting() == "on"


def test_an_answered_log_metric_waits_for_the_wal_flush(tracking, run_id):
    response = tracking.post("runs/log-metric", {"run_id": run_id, **metric("train/loss", 0.5, 7)})
    assert response.status_code == 200, response.content
    assert commit_setting() == "on"


def test_answered_native_points_wait_for_the_wal_flush(tracking, run_id):
    response = log(tracking, run_id, [key("train/loss", range(4), [1.0, 0.5, 0.25, 0.125])])
    assert response.status_code == 200, response.content
    assert commit_setting() == "on"


def test_a_batch_inside_a_callers_transaction_leaves_its_commit_synchronous():
    """The rule the three endpoints rely on, on the sink's own write."""
    job = JobFactory()
    with transaction.atomic():
        write_points(job.pk, {"train/loss": (np.array([0, 1]), np.array([1.0, 2.0]), np.array([0.5, 0.25]))})
        assert commit_setting() == "on"


# -- a real crash: PostgreSQL killed with SIGKILL right after the answers ------------------

CRASH_SETUP = """
import django
django.setup()
from django.contrib.auth import get_user_model
from django.core.management import call_command
from opdweb.teams.models import Membership, Role, Team
from opdweb.tokens.actions import do_create_token
call_command("migrate", verbosity=0)
team = Team.objects.create(name="crash", slug="crash")
user = get_user_model().objects.create_user("crash")
Membership.objects.create(team=team, user=user, role=Role.ADMIN)
print(do_create_token(user=user, team=team, name="trainer", can_write=True)[1])
"""
BATCHES, PER_BATCH = 40, 50


def mlflow_post(connection, secret: str, endpoint: str, body: dict) -> tuple[int, dict]:
    import json

    connection.request("POST", f"/mlflow/api/2.0/mlflow/{endpoint}", body=json.dumps(body),
                       headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"})
    response = connection.getresponse()
    return response.status, json.loads(response.read() or b"{}")


@pytest.mark.faults
@pytest.mark.slow
def test_every_answered_point_survives_a_postgresql_crash(start_asgi_server, service_env):
    """A PostgreSQL of the test's own (so the crash harms nothing else), its WAL writer
    slowed to its 10 s maximum so that a commit that does not wait for the flush is
    still in shared memory when the server dies: MLflow batches are answered, the server
    and every backend are killed with SIGKILL, it starts again (crash recovery), and every
    answered point is there."""
    # Not under tmp_path: a pytest session starting meanwhile makes /tmp/pytest-of-<user>
    # private again, and the server (run as its own account under root) could not start
    # again there.
    data = Path(tempfile.mkdtemp(prefix="opdweb-crash-"))
    try:
        stored, answered = crash_after_answers(data, start_asgi_server, service_env)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    assert stored == answered, f"{answered - stored} of {answered} answered points lost"


def crash_after_answers(data, start_asgi_server, service_env) -> tuple[int, int]:
    """Points stored after the crash, and points answered before it."""
    import http.client
    import signal
    import subprocess
    import sys
    from urllib.parse import unquote

    import psycopg

    from opdweb.embedded_servers import start_embedded_postgres
    from opdweb.traces.models import POINTS_TABLE

    url, server = start_embedded_postgres(data, "crash")
    socket_dir = unquote(url.split("@", 1)[1].split("/", 1)[0])
    try:
        with psycopg.connect(host=socket_dir, user="postgres", dbname="crash", autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
            conn.execute("SELECT pg_reload_conf()")
        env = {**service_env, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "opdweb.settings"}
        made = subprocess.run([sys.executable, "-c", CRASH_SETUP], env=env, capture_output=True, text=True,
                              timeout=300)
        assert made.returncode == 0, made.stderr[-2000:]
        secret = made.stdout.strip().splitlines()[-1]
        host, port = start_asgi_server(DATABASE_URL=url).split(":")
        web = http.client.HTTPConnection(host, int(port), timeout=60)
        status, created = mlflow_post(web, secret, "runs/create", {"experiment_id": "0", "run_name": "crash"})
        assert status == 200, created
        run_id = created["run"]["info"]["run_id"]
        answered = 0
        for batch in range(BATCHES):
            metrics = [{"key": f"k{i}", "value": float(batch), "timestamp": 1, "step": batch}
                       for i in range(PER_BATCH)]
            status, body = mlflow_post(web, secret, "runs/log-batch", {"run_id": run_id, "metrics": metrics})
            assert status == 200, body
            answered += PER_BATCH
        server.signal_group(signal.SIGKILL)  # the postmaster and every backend, at once
        server.proc.wait(timeout=60)
        web.close()
    finally:
        server.stop(time.monotonic() + 15)
    url, server = start_embedded_postgres(data, "crash")  # crash recovery from the WAL
    try:
        with psycopg.connect(host=socket_dir, user="postgres", dbname="crash") as conn:
            stored = conn.execute(f"SELECT count(*) FROM {POINTS_TABLE}").fetchone()[0]
    finally:
        server.stop(time.monotonic() + 15)
    return stored, answered
