"""The MLflow-compatible endpoints, request by request: MLflow's shapes and error codes,
runs ended in the matching state, and bad input refused with a clear 4xx and nothing
written (a closed run, a non-integer step, over MLflow's batch limits, a 10,000-character
metric name, an unknown or another team's run, a changed param)."""
import json
import math

import pytest
from django.test import Client

from opdweb.jobs.models import Job, JobLogEntry, JobState
from opdweb.runs.models import MlflowExperiment, MlflowRun
from opdweb.teams.models import Role
from opdweb.tokens.actions import do_create_token
from opdweb.traces.models import TracePoint, TraceSeries
from tests.web.factories import MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db

API = "/mlflow/api/2.0/mlflow/"


class Tracking:
    """MLflow's REST calls as its client makes them, with a token."""

    def __init__(self, secret: str):
        self.secret = secret
        self.client = Client()

    def post(self, endpoint: str, body, secret: str | None = None):
        raw = body if isinstance(body, (str, bytes)) else json.dumps(body)
        return self.client.post(API + endpoint, data=raw, content_type="application/json",
                                HTTP_AUTHORIZATION=f"Bearer {secret or self.secret}")

    def get(self, endpoint: str, secret: str | None = None, **params):
        return self.client.get(API + endpoint, params, HTTP_AUTHORIZATION=f"Bearer {secret or self.secret}")

    def start_run(self, **body) -> str:
        response = self.post("runs/create", {"experiment_id": "0", "start_time": 1_700_000_000_000, **body})
        assert response.status_code == 200, response.content
        return response.json()["run"]["info"]["run_id"]

    def batch(self, run_id: str, metrics=(), params=(), tags=()):
        return self.post("runs/log-batch", {"run_id": run_id, "metrics": list(metrics), "params": list(params),
                                            "tags": list(tags)})


def metric(key: str, value, step, timestamp: int = 1_700_000_000_000) -> dict:
    return {"key": key, "value": value, "timestamp": timestamp, "step": step}


def points(run_id: str) -> list[tuple[str, int, float]]:
    job = MlflowRun.objects.get(run_id=run_id).job
    return sorted(TracePoint.objects.filter(series__job=job).values_list("series__key", "step", "value"))


def job_of(run_id: str) -> Job:
    return MlflowRun.objects.get(run_id=run_id).job


def assert_refused(response, status: int, code: str, words: str):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error_code"] == code and words in body["message"], body


# -- experiments and runs ----------------------------------------------------------------

def test_an_experiment_is_found_by_name_only_once_made_and_only_in_the_tokens_team(tracking, member):
    assert_refused(tracking.get("experiments/get-by-name", experiment_name="opd"), 404, "RESOURCE_DOES_NOT_EXIST",
                   "Could not find experiment")
    made = tracking.post("experiments/create", {"name": "opd"})
    assert made.status_code == 200
    found = tracking.get("experiments/get-by-name", experiment_name="opd").json()["experiment"]
    assert found["experiment_id"] == made.json()["experiment_id"] and found["name"] == "opd"
    assert found["lifecycle_stage"] == "active"
    assert_refused(tracking.post("experiments/create", {"name": "opd"}), 400, "RESOURCE_ALREADY_EXISTS", "exists")
    other_user = MembershipFactory(team=TeamFactory()).user
    other = Tracking(do_create_token(user=other_user, team=other_user.memberships.get().team, name="x",
                                     can_write=True)[1])
    assert other.get("experiments/get-by-name", experiment_name="opd").status_code == 404
    assert other.get("experiments/get", experiment_id=found["experiment_id"]).status_code == 404


def test_a_run_is_an_external_running_job_of_the_tokens_team(tracking, member):
    user, team = member
    run_id = tracking.start_run(run_name="verl fp8", tags=[{"key": "mlflow.user", "value": "alice"}])
    job = job_of(run_id)
    assert (job.kind, job.state, job.team, job.created_by, job.name) == ("external", "running", team, user, "verl fp8")
    assert job.heartbeat_at is None and job.worker == ""  # nothing runs it here
    info = tracking.get("runs/get", run_id=run_id).json()["run"]["info"]
    assert info["status"] == "RUNNING" and info["run_id"] == run_id and info["user_id"] == "alice"
    assert info["start_time"] == 1_700_000_000_000
    listed = Client()
    listed.force_login(user)
    assert [j["id"] for j in listed.get("/api/jobs?kind=external").json()] == [job.pk]
    page = listed.get("/jobs/?kind=external")
    assert page.status_code == 200 and b"verl fp8" in page.content
    assert f"?clone={job.pk}".encode() not in page.content  # nothing here can re-run it
    detail = listed.get(f"/jobs/{job.pk}/")
    assert detail.status_code == 200 and run_id.encode() in detail.content
    assert b"Close run" in detail.content and b'id="rerun"' not in detail.content  # nothing here can re-run it


@pytest.mark.parametrize("status, state", [("FINISHED", JobState.SUCCEEDED), ("FAILED", JobState.FAILED),
                                           ("KILLED", JobState.CANCELLED)])
def test_ending_a_run_ends_its_job_in_the_matching_state(tracking, run_id, status, state):
    response = tracking.post("runs/update", {"run_id": run_id, "status": status, "end_time": 1_700_000_100_000})
    assert response.status_code == 200 and response.json()["run_info"]["status"] == status
    assert response.json()["run_info"]["end_time"] == 1_700_000_100_000
    assert job_of(run_id).state == state and job_of(run_id).finished_at is not None
    # A retried end_run changes nothing; a different end is refused.
    assert tracking.post("runs/update", {"run_id": run_id, "status": status}).status_code == 200
    other = "FAILED" if status != "FAILED" else "FINISHED"
    assert_refused(tracking.post("runs/update", {"run_id": run_id, "status": other}), 400, "INVALID_STATE",
                   f"already ended as {status}")
    assert job_of(run_id).state == state


@pytest.mark.parametrize("status", ["FINISHED", "FAILED", "KILLED"])
def test_an_ended_run_is_resumed_by_running_as_mlflows_server_does(tracking, run_id, status):
    """``mlflow.start_run(run_id=<ended run>)`` sends RUNNING with the old end time (its
    ``fluent.py``); MLflow's server sets the status, and the run takes points again."""
    assert tracking.post("runs/update", {"run_id": run_id, "status": status, "end_time": 1_700_000_100_000}
                         ).status_code == 200
    assert_refused(tracking.batch(run_id, metrics=[metric("train/loss", 0.5, 30)]), 400, "INVALID_STATE", "closed")
    resumed = tracking.post("runs/update", {"run_id": run_id, "status": "RUNNING", "end_time": 1_700_000_100_000})
    assert resumed.status_code == 200, resumed.content
    assert resumed.json()["run_info"]["status"] == "RUNNING"
    job = job_of(run_id)
    assert job.state == JobState.RUNNING and job.finished_at is None
    assert tracking.batch(run_id, metrics=[metric("train/loss", 0.5, 30)]).status_code == 200
    assert points(run_id) == [("train/loss", 30, 0.5)]
    assert tracking.get("runs/get", run_id=run_id).json()["run"]["info"]["status"] == "RUNNING"
    # And it ends again as a run does.
    assert tracking.post("runs/update", {"run_id": run_id, "status": "FINISHED"}).status_code == 200
    assert job_of(run_id).state == JobState.SUCCEEDED


def test_an_ended_run_is_renamed_as_mlflows_server_renames_it(tracking, run_id):
    """MLflow's ``update_run_info`` refuses only a deleted run, whatever its status."""
    tracking.post("runs/update", {"run_id": run_id, "status": "FINISHED"})
    response = tracking.post("runs/update", {"run_id": run_id, "run_name": "r1 (final)"})
    assert response.status_code == 200 and response.json()["run_info"]["run_name"] == "r1 (final)"
    assert job_of(run_id).name == "r1 (final)" and job_of(run_id).state == JobState.SUCCEEDED


def test_a_quiet_run_is_not_reaped_its_trainer_ends_it(tracking, run_id):
    """An external job has no worker and no heartbeat: the reaper, which fails running jobs
    whose heartbeat stopped, leaves it running however long the trainer is quiet."""
    from datetime import timedelta

    from django.utils import timezone

    from opdweb.jobs.actions import do_reap_stale_jobs

    assert do_reap_stale_jobs(now=timezone.now() + timedelta(days=30)) == []
    assert job_of(run_id).state == JobState.RUNNING


def test_closing_an_external_job_in_the_product_closes_the_run(tracking, run_id, member):
    user, _ = member
    client = Client()
    client.force_login(user)
    assert client.post(f"/api/jobs/{job_of(run_id).pk}/cancel").status_code == 200
    assert job_of(run_id).state == JobState.CANCELLED
    assert tracking.get("runs/get", run_id=run_id).json()["run"]["info"]["status"] == "KILLED"


# -- logging -----------------------------------------------------------------------------

def test_params_tags_and_metrics_are_kept_as_logged(tracking, run_id):
    response = tracking.batch(run_id, metrics=[metric("train/loss", 0.5, 0), metric("train/loss", 0.25, "1")],
                              params=[{"key": "lr", "value": "1e-6"}], tags=[{"key": "hash", "value": "abc"}])
    assert response.status_code == 200 and response.json() == {}
    assert tracking.post("runs/log-metric", {"run_id": run_id, "key": "k3", "value": 0.01, "timestamp": 1,
                                             "step": 3}).status_code == 200
    assert tracking.post("runs/log-parameter", {"run_id": run_id, "key": "seed", "value": "7"}).status_code == 200
    assert tracking.post("runs/set-tag", {"run_id": run_id, "key": "hash", "value": "def"}).status_code == 200
    assert points(run_id) == [("k3", 3, 0.01), ("train/loss", 0, 0.5), ("train/loss", 1, 0.25)]
    config = job_of(run_id).config
    assert config["params"] == {"lr": "1e-6", "seed": "7"} and config["tags"]["hash"] == "def"
    wall = TracePoint.objects.get(series__key="k3").wall_time
    assert wall == 0.001  # the metric's timestamp (ms), as unix seconds
    data = tracking.get("runs/get", run_id=run_id).json()["run"]["data"]
    assert {m["key"]: (m["step"], m["value"]) for m in data["metrics"]} == {"k3": (3, 0.01), "train/loss": (1, 0.25)}


def test_a_resent_batch_writes_nothing_new(tracking, run_id):
    batch = [metric("k3", 0.1 * s, s) for s in range(10)]
    assert tracking.batch(run_id, metrics=batch).status_code == 200
    assert tracking.batch(run_id, metrics=batch).status_code == 200
    assert tracking.batch(run_id, metrics=batch[3:7]).status_code == 200
    assert points(run_id) == [("k3", s, 0.1 * s) for s in range(10)]
    assert TraceSeries.objects.get(key="k3").last_step == 9
    assert not JobLogEntry.objects.exists()


def test_a_second_value_for_a_stored_step_keeps_the_first_and_the_log_says_so(tracking, run_id):
    assert tracking.batch(run_id, metrics=[metric("loss", 1.0, 0)]).status_code == 200
    # step=0 is what the client sends for log_metric without a step: a second value lands there.
    response = tracking.batch(run_id, metrics=[metric("loss", 2.0, 0), metric("loss", 3.0, 1), metric("loss", 4.0, 1)])
    assert response.status_code == 200
    assert points(run_id) == [("loss", 0, 1.0), ("loss", 1, 3.0)]
    entry = JobLogEntry.objects.get(job=job_of(run_id))
    assert entry.level == "WARNING" and "2 logged values not stored" in entry.message
    assert "'loss' step 0: kept 1.0, not 2.0" in entry.message and "'loss' step 1: kept 3.0, not 4.0" in entry.message


def test_nan_and_infinity_are_stored_as_the_trace_store_stores_them(tracking, run_id):
    """MLflow allows them (its client sends the strings); a diverging run is worth seeing."""
    response = tracking.batch(run_id, metrics=[metric("a", "NaN", 0), metric("a", "Infinity", 1),
                                               metric("a", "-Infinity", 2)])
    assert response.status_code == 200
    stored = points(run_id)
    assert math.isnan(stored[0][2]) and stored[1][2] == math.inf and stored[2][2] == -math.inf
    values = [m["value"] for m in tracking.get("runs/get", run_id=run_id).json()["run"]["data"]["metrics"]]
    assert values == ["-Infinity"]  # the last step's value, in MLflow's JSON


# -- bad input: a clear 4xx and nothing written ----------------------------------------------

def assert_nothing_written(run_id: str, params: dict | None = None):
    assert points(run_id) == []
    assert job_of(run_id).config["params"] == (params or {})


@pytest.mark.parametrize("step, words", [(1.5, "must be an integer"), ("two", "must be an integer"),
                                         (True, "must be an integer"), ("1.0", "must be an integer"),
                                         (-1, "outside 0 to 2**53 - 1"), (2**53, "outside 0 to 2**53 - 1")])
def test_a_step_that_is_not_a_trace_step_is_refused(tracking, run_id, step, words):
    response = tracking.batch(run_id, metrics=[metric("ok", 1.0, 0), metric("loss", 1.0, step)],
                              params=[{"key": "lr", "value": "1"}])
    assert_refused(response, 400, "INVALID_PARAMETER_VALUE", words)
    assert "metrics[1]" in response.json()["message"]
    assert_nothing_written(run_id)


@pytest.mark.parametrize("value", [None, "", "1.5", "nan", True, [1]])
def test_a_value_that_is_not_a_number_is_refused(tracking, run_id, value):
    assert_refused(tracking.batch(run_id, metrics=[metric("loss", value, 0)]), 400, "INVALID_PARAMETER_VALUE",
                   "'value' must be a number")
    assert_nothing_written(run_id)


def test_a_bare_nan_literal_is_not_json_and_is_refused(tracking, run_id):
    raw = '{"run_id": "%s", "metrics": [{"key": "a", "value": NaN, "timestamp": 1, "step": 0}]}' % run_id
    assert_refused(tracking.post("runs/log-batch", raw), 400, "INVALID_PARAMETER_VALUE", "not valid JSON")
    assert_nothing_written(run_id)


@pytest.mark.parametrize("what, count, words", [
    ("metrics", 1001, "at most 1000 metrics"),
    ("params", 101, "at most 100 params"),
    ("tags", 101, "at most 100 tags"),
])
def test_a_batch_over_mlflows_limits_is_refused_whole(tracking, run_id, what, count, words):
    items = {"metrics": [metric(f"m{i}", 1.0, 0) for i in range(count if what == "metrics" else 1)],
             "params": [{"key": f"p{i}", "value": "v"} for i in range(count if what == "params" else 1)],
             "tags": [{"key": f"t{i}", "value": "v"} for i in range(count if what == "tags" else 1)]}
    assert_refused(tracking.batch(run_id, **items), 400, "INVALID_PARAMETER_VALUE", words)
    assert_nothing_written(run_id)
    assert "t0" not in job_of(run_id).config["tags"]


def test_a_batch_at_mlflows_limits_is_taken(tracking, run_id):
    response = tracking.batch(run_id, metrics=[metric(f"m{i % 10}", float(i), i // 10) for i in range(800)],
                              params=[{"key": f"p{i}", "value": "v"} for i in range(100)],
                              tags=[{"key": f"t{i}", "value": "v"} for i in range(100)])
    assert response.status_code == 200, response.content
    assert len(points(run_id)) == 800 and len(job_of(run_id).config["params"]) == 100


def test_a_runs_params_and_tags_are_bounded(tracking, run_id):
    big = [{"key": f"p{i}", "value": "v" * 6000} for i in range(100)]
    for n in range(1, 20):
        response = tracking.batch(run_id, params=[{**p, "key": f"{p['key']}-{n}"} for p in big])
        if response.status_code != 200:
            break
    assert_refused(response, 400, "INVALID_PARAMETER_VALUE", "at most 1,048,576 bytes")
    assert len(job_of(run_id).config["params"]) == 100 * (n - 1)  # every batch before it, none of it


def test_a_metric_name_of_ten_thousand_characters_is_refused(tracking, run_id):
    response = tracking.batch(run_id, metrics=[metric("k" * 10_000, 1.0, 0)])
    assert_refused(response, 400, "INVALID_PARAMETER_VALUE", "10,000 characters long; the limit is 200")
    assert len(response.content) < 1000  # the message does not echo the name
    response = tracking.post("runs/log-metric", {"run_id": run_id, "key": "k" * 10_000, "value": 1, "step": 0})
    assert response.status_code == 400
    assert_nothing_written(run_id)
    assert not TraceSeries.objects.exists()


def test_a_closed_run_takes_no_more_points(tracking, run_id):
    assert tracking.post("runs/update", {"run_id": run_id, "status": "FINISHED"}).status_code == 200
    for endpoint, body in [("runs/log-batch", {"metrics": [metric("loss", 1.0, 0)]}),
                           ("runs/log-metric", metric("loss", 1.0, 0)),
                           ("runs/log-parameter", {"key": "lr", "value": "1"}),
                           ("runs/set-tag", {"key": "late", "value": "1"})]:
        assert_refused(tracking.post(endpoint, {"run_id": run_id, **body}), 400, "INVALID_STATE", "is closed")
    assert_nothing_written(run_id)
    assert "late" not in job_of(run_id).config["tags"]


def test_changing_a_param_is_refused_and_its_batch_writes_nothing(tracking, run_id):
    assert tracking.batch(run_id, params=[{"key": "lr", "value": "1e-6"}]).status_code == 200
    response = tracking.batch(run_id, metrics=[metric("loss", 1.0, 0)], params=[{"key": "lr", "value": "1e-5"}],
                              tags=[{"key": "t", "value": "v"}])
    assert_refused(response, 400, "INVALID_PARAMETER_VALUE", "Changing param values is not allowed")
    assert_nothing_written(run_id, params={"lr": "1e-6"})
    assert "t" not in job_of(run_id).config["tags"]


def test_an_unknown_run_is_404(tracking):
    assert_refused(tracking.batch("0" * 32, metrics=[metric("loss", 1.0, 0)]), 404, "RESOURCE_DOES_NOT_EXIST",
                   "not found")
    assert_refused(tracking.get("runs/get", run_id="nope"), 404, "RESOURCE_DOES_NOT_EXIST", "not found")
    assert_refused(tracking.post("runs/log-batch", {"metrics": []}), 400, "INVALID_PARAMETER_VALUE", "run_id")
    assert not TraceSeries.objects.exists()


def test_another_teams_run_is_refused_and_untouched(tracking, run_id, member):
    user, _ = member
    # The owner is in a second team too: the token for that team is told why (403).
    second = MembershipFactory(user=user, team=TeamFactory(), role=Role.MEMBER).team
    mine_elsewhere = Tracking(do_create_token(user=user, team=second, name="other", can_write=True)[1])
    assert_refused(mine_elsewhere.batch(run_id, metrics=[metric("loss", 1.0, 0)]), 403, "PERMISSION_DENIED",
                   f"is for team {second.slug}")
    assert_refused(mine_elsewhere.post("runs/update", {"run_id": run_id, "status": "KILLED"}), 403,
                   "PERMISSION_DENIED", "is for team")
    # Someone outside the team learns nothing (404).
    stranger = MembershipFactory(team=TeamFactory()).user
    theirs = Tracking(do_create_token(user=stranger, team=stranger.memberships.get().team, name="s",
                                      can_write=True)[1])
    assert_refused(theirs.get("runs/get", run_id=run_id), 404, "RESOURCE_DOES_NOT_EXIST", "not found")
    assert_nothing_written(run_id)
    assert job_of(run_id).state == JobState.RUNNING


def test_the_default_experiment_is_made_by_the_first_run_in_it_not_by_a_read(tracking):
    assert_refused(tracking.get("experiments/get", experiment_id="0"), 404, "RESOURCE_DOES_NOT_EXIST", "No experiment")
    assert not MlflowExperiment.objects.exists()
    tracking.start_run()
    assert tracking.get("experiments/get", experiment_id="0").json()["experiment"]["name"] == "Default"


def test_a_nul_character_is_refused_in_mlflows_shape(tracking, run_id):
    assert_refused(tracking.get("runs/get", run_id="a\x00b"), 400, "INVALID_PARAMETER_VALUE", "NUL")
    response = tracking.batch(run_id, tags=[{"key": "t", "value": "a\x00b"}])
    assert_refused(response, 400, "INVALID_PARAMETER_VALUE", "NUL character")
    assert "t" not in job_of(run_id).config["tags"]


def test_a_run_cannot_start_in_another_teams_experiment(tracking, member):
    exp = MlflowExperiment.objects.create(team=TeamFactory(), name="theirs")
    assert_refused(tracking.post("runs/create", {"experiment_id": str(exp.pk)}), 404, "RESOURCE_DOES_NOT_EXIST",
                   "No experiment")
    assert not Job.objects.exists()


# -- tokens on the MLflow path ---------------------------------------------------------------

def test_without_a_token_mlflow_is_told_to_send_one(run_id):
    response = Client().post(API + "runs/log-batch", data=json.dumps({"run_id": run_id}),
                             content_type="application/json")
    assert_refused(response, 401, "UNAUTHENTICATED", "MLFLOW_TRACKING_TOKEN")
    response = Client().get(API + "runs/get", {"run_id": run_id}, HTTP_AUTHORIZATION="Bearer opd_wrong")
    assert_refused(response, 401, "UNAUTHENTICATED", "unknown API token")


def test_a_read_only_token_reads_runs_and_cannot_log(tracking, run_id, member):
    user, team = member
    reader = Tracking(do_create_token(user=user, team=team, name="ro", can_write=False)[1])
    assert reader.get("runs/get", run_id=run_id).status_code == 200
    assert_refused(reader.batch(run_id, metrics=[metric("loss", 1.0, 0)]), 403, "PERMISSION_DENIED", "read-only")
    assert_refused(reader.post("runs/create", {"experiment_id": "0"}), 403, "PERMISSION_DENIED", "read-only")
    assert_nothing_written(run_id)
    assert Job.objects.count() == 1


def test_a_token_past_its_write_rate_gets_request_limit_exceeded_and_writes_nothing(tracking, run_id, settings):
    settings.API_TOKEN_WRITES_PER_MINUTE = 0  # every write is one too many (the run was made before)
    response = tracking.batch(run_id, metrics=[metric("loss", 1.0, 0)])
    assert_refused(response, 429, "REQUEST_LIMIT_EXCEEDED", "writes this minute")
    assert 1 <= int(response["Retry-After"]) <= 60
    assert_nothing_written(run_id)
    assert tracking.get("runs/get", run_id=run_id).status_code == 200  # reads are not limited


def test_an_endpoint_opdweb_does_not_serve_is_endpoint_not_found(tracking):
    assert_refused(tracking.post("runs/delete", {"run_id": "x"}), 404, "ENDPOINT_NOT_FOUND", "does not serve")
    assert_refused(tracking.get("runs/log-batch"), 405, "ENDPOINT_NOT_FOUND", "use POST")


def test_a_body_over_the_request_limit_gets_mlflows_error_shape(tracking, run_id, settings):
    settings.MLFLOW_MAX_REQUEST_BYTES = 1000
    response = tracking.batch(run_id, metrics=[metric(f"m{i}", 1.0, 0) for i in range(50)])
    assert_refused(response, 413, "INVALID_PARAMETER_VALUE", "exceeds the limit of 1000 bytes")
    assert_nothing_written(run_id)


def test_a_full_batch_of_long_keys_fits_mlflows_request_limit_not_only_djangos(tracking, run_id, settings):
    """1,000 metrics with 200-character keys are about 280 KB: over the 256 KiB the rest of
    the product takes, within the 1 MB MLflow's server takes."""
    keys = [f"{i:03d}" + "k" * 197 for i in range(1000)]
    body = {"run_id": run_id, "metrics": [metric(key, 1.0, 0) for key in keys]}
    assert len(json.dumps(body)) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert tracking.post("runs/log-batch", body).status_code == 200
    assert len(points(run_id)) == 1000
