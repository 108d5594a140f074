"""An answered batch is a durable batch: ``runs/log-batch``, ``runs/log-metric`` and
``POST /api/runs/<id>/points`` commit with ``synchronous_commit`` on, so the 200 comes
only once the points' WAL is flushed (a PostgreSQL crash after the answer loses none).
The worker's own trace sink, which answers nobody, keeps the fast commit on the
transactions it owns (:mod:`opdweb.traces.batches`)."""
import numpy as np
import pytest
from django.db import connection, transaction

from opdweb.tokens.actions import do_create_token
from opdweb.traces.batches import write_points
from tests.web.factories import JobFactory
from tests.web.test_mlflow_endpoints import Tracking, metric
from tests.web.test_run_points import key, log

pytestmark = pytest.mark.django_db


@pytest.fixture
def tracking(member):
    user, team = member
    return Tracking(do_create_token(user=user, team=team, name="trainer", can_write=True)[1])


@pytest.fixture
def run_id(tracking):
    return tracking.start_run(run_name="r1")


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
