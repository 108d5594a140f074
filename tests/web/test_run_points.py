"""``POST /api/runs/<run_id>/points``, the native client's batches held per key: each point
stored once (a resent batch writes nothing), the first value of a step kept, non-finite
values as MLflow spells them, the same run as MLflow's endpoints feed; and bad input (a
non-integer step, lists of unequal length, a reserved or over-long key, a batch over the
limit, a closed, unknown or other team's run, a read-only token, a session) refused whole
with a clear 4xx and nothing written."""
import json
import math
import re

import pytest
from django.test import Client

from opdweb.jobs.models import JobLogEntry
from opdweb.runs.api import MAX_POINTS_PER_REQUEST
from opdweb.runs.models import MlflowRun
from opdweb.tokens.actions import do_create_token
from opdweb.traces.models import MAX_STEP, TracePoint
from tests.web.factories import MembershipFactory, TeamFactory
from tests.web.test_mlflow_endpoints import Tracking, metric, points

pytestmark = pytest.mark.django_db


def log(tracking, run_id: str, series, secret: str | None = None, client: Client | None = None):
    raw = series if isinstance(series, (str, bytes)) else json.dumps({"series": series})
    headers = {} if client is not None else {"HTTP_AUTHORIZATION": f"Bearer {secret or tracking.secret}"}
    return (client or tracking.client).post(f"/api/runs/{run_id}/points", data=raw, content_type="application/json",
                                            **headers)


def key(name: str, steps, values, timestamps=None) -> dict:
    entry = {"key": name, "steps": list(steps), "values": list(values)}
    if timestamps is not None:
        entry["timestamps"] = list(timestamps)
    return entry


def assert_refused(response, status: int, words: str):
    assert response.status_code == status, response.content
    assert words in response.json()["detail"], response.json()


def test_points_are_stored_once_and_a_resent_batch_writes_nothing(tracking, run_id):
    batch = [key("train/loss", range(5), [1.0, 0.5, 0.25, 0.125, 0.0625], [1_700_000_000_000 + i for i in range(5)]),
             key("rollout/k3", [0, 2, 4], [1e-3, 2e-3, 4e-3])]
    first = log(tracking, run_id, batch)
    assert first.status_code == 200, first.content
    assert first.json() == {"received": 8, "written": 8}
    assert log(tracking, run_id, batch).json() == {"received": 8, "written": 0}
    assert points(run_id) == sorted([("train/loss", i, 2.0 ** -i) for i in range(5)]
                                    + [("rollout/k3", 0, 1e-3), ("rollout/k3", 2, 2e-3), ("rollout/k3", 4, 4e-3)])
    walls = sorted(TracePoint.objects.filter(series__key="train/loss").values_list("wall_time", flat=True))
    assert walls == pytest.approx([1_700_000_000 + i / 1000 for i in range(5)])


def test_a_step_keeps_its_first_value_and_the_log_names_the_conflicts(tracking, run_id):
    assert log(tracking, run_id, [key("loss", [0, 1], [1.0, 2.0])]).json()["written"] == 2
    # step 1 again with another value, step 2 twice in one batch with two values, step 3 new
    answer = log(tracking, run_id, [key("loss", [1, 2, 2, 3], [9.0, 3.0, 7.0, 4.0])])
    assert answer.json() == {"received": 4, "written": 2}
    assert points(run_id) == [("loss", 0, 1.0), ("loss", 1, 2.0), ("loss", 2, 3.0), ("loss", 3, 4.0)]
    message = JobLogEntry.objects.get(job=MlflowRun.objects.get(run_id=run_id).job, level="WARNING").message
    assert message.startswith("2 logged values not stored") and "'loss' step 1: kept 2.0, not 9.0" in message
    assert "'loss' step 2: kept 3.0, not 7.0" in message


def test_points_land_in_the_same_series_as_mlflows_batches(tracking, run_id):
    assert tracking.batch(run_id, [metric("loss", 1.0, 0), metric("loss", 2.0, 1)]).status_code == 200
    assert log(tracking, run_id, [key("loss", [1, 2], [2.0, 3.0])]).json() == {"received": 2, "written": 1}
    assert points(run_id) == [("loss", 0, 1.0), ("loss", 1, 2.0), ("loss", 2, 3.0)]


def test_non_finite_values_are_spelled_as_mlflow_spells_them(tracking, run_id):
    answer = log(tracking, run_id, [key("x", [0, 1, 2, 3], ["NaN", "Infinity", "-Infinity", 0.5])])
    assert answer.json()["written"] == 4
    values = dict((step, value) for _, step, value in points(run_id))
    assert math.isnan(values[0]) and values[1] == math.inf and values[2] == -math.inf and values[3] == 0.5


def test_the_largest_step_a_trace_holds_is_taken(tracking, run_id):
    assert log(tracking, run_id, [key("x", [MAX_STEP], [1.0])]).json()["written"] == 1


@pytest.mark.parametrize("series, words", [
    ([key("x", [1.5], [1.0])], "series.0.steps.0: must be a whole number"),
    ([key("x", ["3"], [1.0])], "series.0.steps.0: must be a whole number"),
    ([key("x", [True], [1.0])], "series.0.steps.0: must be a whole number"),
    ([key("x", [-1], [1.0])], "series.0.steps.0: must be at least 0"),
    ([key("x", [MAX_STEP + 1], [1.0])], "series.0.steps.0: must be at most"),
    ([key("x", [0, 1], [1.0])], "parallel lists; got 2 steps, 1 values"),
    ([key("x", [0], [1.0], [1, 2])], "got 1 steps, 1 values, 2 timestamps"),
    ([key("x", [0], ["1.0"])], 'series.0.values: values[0] must be a finite number or "NaN"'),
    ([key("x", [0, 1], [1.0, None])], "values[1] must be a finite number or"),
    ([key("x", [0], [False])], "values[0] must be a finite number or"),
    ([{"key": "x", "steps": [0], "values": "1.0"}], "values must be a list of numbers; input should be a valid list"),
    ([{"key": "x", "steps": [0], "values": {"0": 1.0}}], "values must be a list of numbers"),
    ([{"key": "x", "steps": 0, "values": [1.0]}], "series.0.steps: must be a list"),
    ([key("", [0], [1.0])], "series.0.key: must not be empty"),
    ([key("k" * 10_000, [0], [1.0])], "series.0.key: is too long (at most 200 characters)"),
    ([key("a\x00b", [0], [1.0])], "series.0.key"),
    ([key("x", [0], [1.0]), key("x", [1], [2.0])], "key 'x' appears twice"),
    ([{"key": "x", "steps": [0], "values": [1.0], "unit": "s"}], "series.0.unit"),
    ([key("opdweb/multiple", [0], [1.0])], "keys under 'opdweb/' are the product's own"),
])
def test_bad_points_are_refused_whole_and_nothing_is_written(tracking, run_id, series, words):
    good = key("good", [0], [1.0])
    response = log(tracking, run_id, [good, *series])
    assert response.status_code == 400, response.content
    assert words.replace("series.0", "series.1") in response.json()["detail"]
    assert points(run_id) == []


def test_a_value_json_reads_as_infinite_is_refused(tracking, run_id):
    for literal in ("1e400", "NaN", "-Infinity"):
        body = '{"series": [{"key": "x", "steps": [0], "values": [%s]}]}' % literal
        assert_refused(log(tracking, run_id, body), 400, "values[0] must be a finite number or")
    assert_refused(log(tracking, run_id, '{"series": ['), 400, "JSON")
    assert points(run_id) == []


def test_a_batch_over_the_limit_is_refused(tracking, run_id):
    n = MAX_POINTS_PER_REQUEST // 2 + 1
    response = log(tracking, run_id, [key("a", range(n), [0] * n), key("b", range(n), [0] * n)])
    assert_refused(response, 400, f"at most {MAX_POINTS_PER_REQUEST:,} points; this one has {2 * n:,}")
    assert points(run_id) == []


def test_a_body_over_the_endpoints_own_limit_is_a_413(tracking, run_id):
    big = json.dumps({"series": [key("x", range(700_000), [0.5] * 700_000)]})
    assert len(big) > 8_000_000
    assert_refused(log(tracking, run_id, big), 413, "exceeds the limit of 8000000 bytes")
    assert points(run_id) == []


def test_a_body_past_the_sites_limit_but_within_the_endpoints_is_taken(tracking, run_id):
    n = 30_000
    body = json.dumps({"series": [key("x", range(n), [0.123456789] * n, [1_700_000_000_000] * n)]})
    assert len(body) > 256 * 1024
    assert log(tracking, run_id, body).json() == {"received": n, "written": n}


def test_a_closed_run_takes_no_points(tracking, run_id):
    assert tracking.post("runs/update", {"run_id": run_id, "status": "FINISHED"}).status_code == 200
    assert_refused(log(tracking, run_id, [key("x", [0], [1.0])]), 400, "is closed")
    assert points(run_id) == []


def test_an_unknown_run_is_a_404(tracking):
    assert_refused(log(tracking, "0" * 32, [key("x", [0], [1.0])]), 404, "not found")


def test_a_read_only_token_and_another_teams_token_write_nothing(tracking, run_id, member):
    user, team = member
    read_only = do_create_token(user=user, team=team, name="ro", can_write=False)[1]
    response = log(tracking, run_id, [key("x", [0], [1.0])], secret=read_only)
    assert response.status_code == 403 and "read-only" in response.json()["detail"]
    other = TeamFactory()
    MembershipFactory(team=other, user=user)
    elsewhere = do_create_token(user=user, team=other, name="other", can_write=True)[1]
    response = log(tracking, run_id, [key("x", [0], [1.0])], secret=elsewhere)
    assert response.status_code == 404  # a token reaches its own team only: the run is not there
    assert points(run_id) == []


def test_an_unknown_token_is_a_401(tracking, run_id):
    response = log(tracking, run_id, [key("x", [0], [1.0])], secret="opd_" + "x" * 43)
    assert response.status_code == 401
    assert points(run_id) == []


def test_a_session_without_a_token_is_told_to_use_one(tracking, run_id, member):
    user, _ = member
    client = Client()
    client.force_login(user)
    response = client.post(f"/api/runs/{run_id}/points", data=json.dumps({"series": []}),
                           content_type="application/json")
    assert_refused(response, 403, "logged with an API token of its team")
    assert points(run_id) == []


def test_the_endpoint_is_in_the_openapi_document():
    document = Client().get("/api/openapi.json").json()
    operation = document["paths"]["/api/runs/{run_id}/points"]["post"]
    assert "held per key" in operation["summary"]
    schema = json.dumps(document)
    assert "PointsIn" in schema and "SeriesIn" in schema
    # Every {name} in a path is a declared path parameter (OpenAPI requires it): Django's
    # str converter takes one or more characters, never a "/".
    (run_id,) = [p for p in operation["parameters"] if p["in"] == "path"]
    assert run_id["name"] == "run_id" and run_id["required"] is True
    assert run_id["schema"]["type"] == "string" and run_id["schema"]["minLength"] == 1
    assert re.fullmatch(run_id["schema"]["pattern"], "0a1b2c") and not re.search(run_id["schema"]["pattern"], "a/b")


def test_every_path_template_names_only_declared_parameters():
    document = Client().get("/api/openapi.json").json()
    for path, operations in document["paths"].items():
        named = set(re.findall(r"{(\w+)}", path))
        for method, operation in operations.items():
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            assert declared == named, f"{method.upper()} {path}: declares {sorted(declared)}"


def test_a_linked_runs_k3_becomes_its_multiple_and_is_watched_as_through_mlflow(member):
    from opdweb.runs.metric_map import MULTIPLE_KEY
    from opdweb.runs.models import Alert
    from tests.web.test_run_linking import BUDGET, UNIT_K3, approve, tags

    user, team = member
    tracking = Tracking(do_create_token(user=user, team=team, name="trainer", can_write=True)[1])
    approval = approve(team, user)
    run_id = tracking.start_run(tags=tags(opdweb_approval=str(approval.pk)))
    # 20x, 40x, then 60x, 70x, 80x: past the 50x budget from step 3 on (the rule's default
    # asks for 3 steps in a row above it, so it alerts at step 5)
    k3 = [20 * UNIT_K3, 40 * UNIT_K3, 60 * UNIT_K3, 70 * UNIT_K3, 80 * UNIT_K3]
    answer = log(tracking, run_id, [key("rollout_corr/k3_kl", range(1, 6), k3),
                                    key("train/loss", range(1, 6), [0] * 5)])
    assert answer.json() == {"received": 10, "written": 10}
    derived = {step: value for name, step, value in points(run_id) if name == MULTIPLE_KEY}
    assert derived == {1: pytest.approx(20.0), 2: pytest.approx(40.0), 3: pytest.approx(60.0),
                       4: pytest.approx(70.0), 5: pytest.approx(80.0)}
    assert all(derived[s] > BUDGET for s in (3, 4, 5))
    alert = Alert.objects.get(job=MlflowRun.objects.get(run_id=run_id).job, kind="budget")
    assert alert.step == 3  # above since step 3, alerted once the third step in a row came
    approval.refresh_from_db()
    assert approval.breached_at_step == 3


@pytest.mark.django_db(transaction=True)
def test_batches_keep_the_planners_row_counts_current_without_autovacuum(member):
    """Each batch's sink lives for one request, so the batches of a process check the
    statistics once per ANALYZE_CHECK_ROWS rows together (not at every close)."""
    from django.db import connection

    from opdweb.runs.points import _Statistics
    from opdweb.traces.analyze import ANALYZE_CHECK_ROWS

    def planner_rows() -> float:
        with connection.cursor() as cursor:
            cursor.execute("SELECT reltuples FROM pg_class WHERE oid = 'traces_tracepoint'::regclass")
            return cursor.fetchone()[0]

    user, team = member
    tracking = Tracking(do_create_token(user=user, team=team, name="trainer", can_write=True)[1])
    run_id = tracking.start_run(run_name="big")
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE traces_tracepoint SET (autovacuum_enabled = false)")
    try:
        _Statistics.unchecked = 0
        half = ANALYZE_CHECK_ROWS // 2  # 100,000: one request's most
        assert log(tracking, run_id, [key("x", range(half), [1.0] * half)]).json()["written"] == half
        assert planner_rows() != half  # not checked yet
        assert log(tracking, run_id, [key("x", range(half, 2 * half), [1.0] * half)]).json()["written"] == half
        assert planner_rows() == TracePoint.objects.count() == 2 * half
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE traces_tracepoint RESET (autovacuum_enabled)")
