"""The official MLflow client (``mlflow-skinny``, pinned in requirements-test.txt) against a
real daphne: with ``MLFLOW_TRACKING_URI`` pointed at the product and ``MLFLOW_TRACKING_TOKEN``
set, a trainer's usual calls make an ``external`` job whose params, tags and trace points are
exactly what it logged, once each, also after a batch is sent again."""
from __future__ import annotations

import http.client
import json
import math

import pytest
import redis
from django.conf import settings

from opdweb.jobs.broker import queue_keys
from opdweb.jobs.models import Job, JobState
from opdweb.runs.models import MlflowRun
from opdweb.teams.models import AuditEntry
from opdweb.tokens.actions import do_create_token, do_revoke_token
from opdweb.tokens.models import ApiToken
from opdweb.traces.models import TracePoint

STEPS = range(5)


def loss(step: int) -> float:
    return 2.0 / (step + 1)


def k3(step: int) -> float:
    return 0.001 * (step + 1) ** 1.5


def k1(step: int) -> float:
    return -0.0005 * step


def stored_points(job: Job) -> list[tuple[str, int, float]]:
    return sorted(TracePoint.objects.filter(series__job=job).values_list("series__key", "step", "value"))


@pytest.fixture
def mlflow_client(member, asgi_server, monkeypatch):
    """The ``mlflow`` module pointed at the server with a read-write token of the member's
    team; ``mlflow.calls`` records each REST call the client makes (method, endpoint, body)."""
    # The client's usage telemetry would go to MLflow's servers: off (it also stays off under
    # pytest, which the client detects, but not by chance).
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("DO_NOT_TRACK", "true")
    import mlflow
    from mlflow.utils import rest_utils

    user, team = member
    _, secret = do_create_token(user=user, team=team, name="cluster", can_write=True)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://{asgi_server}/mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", secret)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # a refusal shows at once, not after backoff
    calls: list[tuple[str, str, dict | None]] = []
    real = rest_utils.http_request

    def recorded(host_creds, endpoint, method, *args, **kwargs):  # a spy: every call goes through
        calls.append((method, endpoint, kwargs.get("json", kwargs.get("params"))))
        return real(host_creds, endpoint, method, *args, **kwargs)

    monkeypatch.setattr(rest_utils, "http_request", recorded)
    # The client remembers the experiment last set, in this process and its environment.
    monkeypatch.setattr(mlflow.tracking.fluent, "_active_experiment_id", None)
    for name in ("MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.setenv(name, "")  # so that the end of the test removes what set_experiment sets
        monkeypatch.delenv(name)
    mlflow.calls = calls
    mlflow.secret = secret
    mlflow.server = asgi_server
    yield mlflow
    while mlflow.active_run() is not None:
        mlflow.end_run()


def raw_post(server: str, path: str, body: dict, secret: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(server, timeout=30)
    conn.request("POST", path, body=json.dumps(body),
                 headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"})
    response = conn.getresponse()
    answer = json.loads(response.read() or b"{}")
    conn.close()
    return response.status, answer


def test_a_run_logged_by_the_official_client_is_an_external_job_with_exactly_its_points(mlflow_client, member):
    mlflow = mlflow_client
    user, team = member
    broker = redis.Redis.from_url(settings.REDIS_URL)
    queued_before = sum(broker.llen(key) for key in queue_keys(["gpu", "cpu"]))  # an earlier test's, no worker ran
    mlflow.set_experiment("opd-smollm2")
    with mlflow.start_run(run_name="fp8-kv run") as run:
        run_id = run.info.run_id
        mlflow.log_params({"lr": "1e-6", "rollout.quantization": "fp8"})
        mlflow.log_param("seed", 7)
        mlflow.set_tag("approved_config", "cfg-1234abcd")
        for step in STEPS:
            mlflow.log_metric("train/loss", loss(step), step=step)
            mlflow.log_metrics({"rollout_corr/k3_kl": k3(step), "rollout_corr/kl": k1(step)}, step=step)

        job = MlflowRun.objects.get(run_id=run_id).job
        expected = sorted([("train/loss", s, loss(s)) for s in STEPS] + [("rollout_corr/k3_kl", s, k3(s))
                          for s in STEPS] + [("rollout_corr/kl", s, k1(s)) for s in STEPS])
        assert stored_points(job) == expected

        # The same batch again, as a retry after a lost answer would send it: nothing changes.
        batches = [body for method, endpoint, body in mlflow.calls if endpoint.endswith("/runs/log-batch")
                   and body.get("metrics")]
        status, answer = raw_post(mlflow.server, "/mlflow/api/2.0/mlflow/runs/log-batch", batches[-1], mlflow.secret)
        assert (status, answer) == (200, {})
        assert stored_points(job) == expected
        assert job.state == JobState.RUNNING

    job.refresh_from_db()
    assert job.kind == "external" and job.state == JobState.SUCCEEDED and job.finished_at is not None
    assert job.team == team and job.created_by == user and job.name == "fp8-kv run"
    assert job.config["params"] == {"lr": "1e-6", "rollout.quantization": "fp8", "seed": "7"}
    assert job.config["tags"]["approved_config"] == "cfg-1234abcd"
    assert job.config["mlflow"] == {"experiment_id": job.config["mlflow"]["experiment_id"],
                                    "experiment": "opd-smollm2", "run_id": run_id}
    assert stored_points(job) == expected
    assert AuditEntry.objects.filter(team=team, action="run.started", subject_id=job.pk).count() == 1
    # Nothing was sent to a worker: both job queues hold what they held before.
    assert sum(broker.llen(key) for key in queue_keys(["gpu", "cpu"])) == queued_before

    # What the client reads back is what it logged.
    fetched = mlflow.get_run(run_id)
    assert fetched.info.status == "FINISHED"
    assert fetched.data.params == {"lr": "1e-6", "rollout.quantization": "fp8", "seed": "7"}
    assert fetched.data.metrics == {"train/loss": loss(4), "rollout_corr/k3_kl": k3(4), "rollout_corr/kl": k1(4)}

    served = {"experiments/get-by-name", "experiments/create", "experiments/get", "runs/create", "runs/get",
              "runs/update", "runs/log-batch", "runs/log-metric", "runs/log-parameter", "runs/set-tag"}
    called = {endpoint.removeprefix("/api/2.0/mlflow/") for _, endpoint, _ in mlflow.calls}
    assert called <= served, called - served
    print("MLflow endpoints the client called:", sorted(called))


def test_the_runs_points_come_out_of_the_products_export_and_charts_unchanged(mlflow_client, member):
    mlflow = mlflow_client
    with mlflow.start_run() as run:
        for step in STEPS:
            mlflow.log_metrics({"rollout_corr/k3_kl": k3(step), "eval/accuracy": math.nan if step == 2 else 0.5},
                               step=step)
    job = MlflowRun.objects.get(run_id=run.info.run_id).job
    conn = http.client.HTTPConnection(mlflow.server, timeout=30)
    conn.request("GET", f"/api/jobs/{job.pk}/export?format=jsonl&key=rollout_corr/k3_kl",
                 headers={"Authorization": f"Bearer {mlflow.secret}"})
    response = conn.getresponse()
    lines = [json.loads(line) for line in response.read().decode().splitlines()]
    assert response.status == 200
    assert [(p["step"], p["value"]) for p in lines] == [(s, k3(s)) for s in STEPS]
    conn.request("GET", f"/api/jobs/{job.pk}/series/downsampled?key=eval/accuracy&buckets=5",
                 headers={"Authorization": f"Bearer {mlflow.secret}"})
    response = conn.getresponse()
    buckets = json.loads(response.read())["buckets"]
    conn.close()
    assert response.status == 200
    # NaN is stored as the trace store stores it, and read back as the string "NaN".
    assert [b[3] for b in buckets] == [0.5, 0.5, "NaN", 0.5, 0.5]
    # The default experiment ("0" to the client) is the team's "Default".
    assert job.config["mlflow"]["experiment"] == "Default"


def test_asynchronous_logging_as_trl_does_it_lands_every_point_once(mlflow_client):
    """transformers' MLflow callback (TRL's ``report_to="mlflow"``) logs with
    ``synchronous=False``: the client queues the points and sends them as log-batches from a
    thread of its own; ending the run flushes them."""
    mlflow = mlflow_client
    with mlflow.start_run() as run:
        for step in range(40):
            mlflow.log_metrics({"train/loss": loss(step), "sampling/sampling_logp_difference/mean": k3(step)},
                               step=step, synchronous=False)
    job = MlflowRun.objects.get(run_id=run.info.run_id).job
    expected = sorted([("train/loss", s, loss(s)) for s in range(40)]
                      + [("sampling/sampling_logp_difference/mean", s, k3(s)) for s in range(40)])
    assert stored_points(job) == expected
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED


def test_a_token_revoked_mid_run_stops_the_client_with_the_reason_and_nothing_is_written(mlflow_client, member):
    from mlflow.exceptions import MlflowException

    mlflow = mlflow_client
    user, _ = member
    run = mlflow.start_run()
    mlflow.log_metric("train/loss", 1.0, step=0)
    do_revoke_token(token=ApiToken.objects.get(), actor=user)
    with pytest.raises(MlflowException, match="was revoked"):
        mlflow.log_metric("train/loss", 0.5, step=1)
    with pytest.raises(MlflowException, match="UNAUTHENTICATED"):
        mlflow.end_run()
    job = MlflowRun.objects.get(run_id=run.info.run_id).job
    assert stored_points(job) == [("train/loss", 0, 1.0)]
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


def test_a_job_page_following_the_run_gets_each_logged_point_live_once(mlflow_client, member, client):
    """The job page's websocket (the live charts) follows an MLflow run as it follows any
    job: each point the trainer logs arrives once, a resent batch sends nothing new, and
    the end of the run arrives as the job's state."""
    import asyncio

    from websockets.asyncio.client import connect

    from tests.web.test_live_channel import session_cookie

    mlflow = mlflow_client
    user, _ = member
    run = mlflow.MlflowClient().create_run(experiment_id="0")  # made here, logged to from the trainer's thread
    job = MlflowRun.objects.get(run_id=run.info.run_id).job
    cookie = session_cookie(client, user)
    url = f"ws://{mlflow.server}/ws/jobs/{job.pk}/"
    logged = [("train/loss", s, loss(s)) for s in STEPS] + [("rollout_corr/k3_kl", s, k3(s)) for s in STEPS]

    def trainer():  # the client's active run is per thread: this one resumes the run made above
        with mlflow.start_run(run_id=run.info.run_id):
            for step in STEPS:
                mlflow.log_metrics({"train/loss": loss(step), "rollout_corr/k3_kl": k3(step)}, step=step)
            batch = next(body for _, endpoint, body in reversed(mlflow.calls) if endpoint.endswith("/log-batch"))
            assert raw_post(mlflow.server, "/mlflow/api/2.0/mlflow/runs/log-batch", batch, mlflow.secret)[0] == 200

    async def follow():
        points, states, replayed = [], [], []

        async def take(ws):
            msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=120))
            if msg["type"] == "points":
                points.extend((key, step, value) for key, step, _, value in msg["points"])
            elif msg["type"] == "state":
                states.append(msg["job"]["state"])
            elif msg["type"] == "replayed":
                replayed.append(msg)

        async with connect(url, additional_headers={"Cookie": cookie, "Origin": "http://127.0.0.1"}) as ws:
            await ws.send(json.dumps({"type": "resume", "after": {}}))
            while not replayed:  # the consumer joined the job's group before its replay: what follows is live
                await take(ws)
            assert points == []  # nothing logged yet
            logging = asyncio.get_running_loop().run_in_executor(None, trainer)
            while "succeeded" not in states:
                await take(ws)
            await logging
        return points

    points = asyncio.run(follow())
    assert sorted(points) == sorted(logged)  # each once: the resent batch sent nothing
