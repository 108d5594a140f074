"""Bad input to the W&B endpoints, sent raw to a real daphne as a broken or hostile client
would: each gets a 4xx with W&B's JSON error (``{"errors": [{"message": ...}]}``, which the
client prints), or a 200 that keeps what can be kept and names the rest in the job's log;
never a 500, and nothing already answered is lost."""
from __future__ import annotations

import base64
import http.client
import json
import math

import pytest

from opdweb.runs.models import WandbRun
from opdweb.tokens.actions import do_create_token
from opdweb.traces.models import TracePoint

UPSERT = """mutation UpsertBucket($name: String, $project: String) {
  upsertBucket(input: {name: $name, modelName: $project}) { bucket { id name historyLineCount } inserted }
}"""


class Wandb:
    def __init__(self, server: str, key: str, entity: str):
        self.server = server
        self.entity = entity
        self.auth = "Basic " + base64.b64encode(f"api:{key}".encode()).decode()

    def send(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None
             ) -> tuple[int, dict]:
        conn = http.client.HTTPConnection(self.server, timeout=60)
        conn.request(method, f"/wandb/{path}", body=body,
                     headers={"Authorization": self.auth, "Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        raw = response.read()
        conn.close()
        assert response.getheader("Content-Type", "").startswith("application/json"), raw[:300]
        return response.status, json.loads(raw)

    def graphql(self, query: str, **variables) -> tuple[int, dict]:
        return self.send("POST", "graphql", json.dumps({"query": query, "variables": variables}).encode())

    def stream(self, run: str, body) -> tuple[int, dict]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.send("POST", f"files/{self.entity}/p/{run}/file_stream", raw)


def history(offset: int, *rows: dict) -> dict:
    return {"files": {"wandb-history.jsonl": {"offset": offset, "content": [json.dumps(r) for r in rows]}}}


@pytest.fixture
def wandb_api(member, asgi_server):
    user, team = member
    _, key = do_create_token(user=user, team=team, name="trainer", can_write=True)
    api = Wandb(asgi_server, key, team.slug)
    status, answer = api.graphql(UPSERT, name="r1", project="p")
    assert status == 200 and answer["data"]["upsertBucket"]["inserted"] is True, answer
    return api


def points(key: str | None = None) -> list[tuple[str, int, float]]:
    rows = TracePoint.objects.filter(series__job__mlflow_run__wandb__name="r1")
    if key is not None:
        rows = rows.filter(series__key=key)
    return sorted(rows.values_list("series__key", "step", "value"))


@pytest.mark.django_db(transaction=True)
def test_nan_and_infinities_are_points_and_a_step_going_back_keeps_the_first_value(wandb_api):
    body = b'{"files": {"wandb-history.jsonl": {"offset": 0, "content": ["{\\"_step\\": 0, \\"x\\": NaN}", ' \
           b'"{\\"_step\\": 1, \\"x\\": Infinity}", "{\\"_step\\": 2, \\"x\\": -Infinity}", ' \
           b'"{\\"_step\\": 3, \\"x\\": 1e400}"]}}}'
    assert wandb_api.stream("r1", body)[0] == 200
    stored = points("x")
    assert [s for _, s, _ in stored] == [0, 1, 2, 3]
    assert math.isnan(stored[0][2]) and stored[1][2] == math.inf and stored[2][2] == -math.inf
    assert stored[3][2] == math.inf  # 1e400 is past a double: JSON readers make it infinity
    status, _ = wandb_api.stream("r1", history(4, {"_step": 1, "x": 5.0}, {"_step": 5, "x": 6.0}))
    assert status == 200
    assert points("x")[1] == ("x", 1, math.inf) and points("x")[-1] == ("x", 5, 6.0)
    log = " ".join(e.message for e in WandbRun.objects.get(name="r1").run.job.log_entries.all())
    assert "'x' step 1: kept inf, not 5.0" in log


@pytest.mark.django_db(transaction=True)
def test_a_10000_character_key_and_a_reserved_key_are_left_out_and_named_the_rest_is_kept(wandb_api):
    long_key = "k" * 10_000
    status, _ = wandb_api.stream("r1", history(0, {"_step": 0, long_key: 1.0, "opdweb/multiple": 3.0, "ok": 2.0,
                                                   "text": "hello", "flag": True, "img": {"_type": "image-file"}}))
    assert status == 200
    assert points() == [("ok", 0, 2.0)]
    log = " ".join(e.message for e in WandbRun.objects.get(name="r1").run.job.log_entries.all())
    assert "longer than 200 characters" in log and "under the product's own prefix" in log


@pytest.mark.django_db(transaction=True)
def test_a_resent_chunk_writes_nothing_twice(wandb_api):
    rows = [{"_step": s, "loss": 1 / (s + 1)} for s in range(5)]
    assert wandb_api.stream("r1", history(0, *rows))[0] == 200
    assert wandb_api.stream("r1", history(0, *rows))[0] == 200  # the answer was lost: sent again
    assert wandb_api.stream("r1", history(3, *rows[3:], {"_step": 5, "loss": 0.1}))[0] == 200  # overlapping
    assert [s for _, s, _ in points("loss")] == [0, 1, 2, 3, 4, 5]
    assert WandbRun.objects.get(name="r1").history_lines == 6


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("body", "status", "says"), [
    (b"not json", 400, "not JSON"),
    (b"[1, 2]", 400, "JSON object"),
    (b'{"files": {"wandb-history.jsonl": {"offset": -1, "content": []}}}', 400, "offset"),
    (b'{"files": {"wandb-history.jsonl": {"offset": 0, "content": [3]}}}', 400, "list of strings"),
    (b'{"files": {"wandb-history.jsonl": {"offset": 0, "content": ["{\\"_step\\": 0, \\"a\\": 1}", "nope"]}}}',
     400, "line 1 is not JSON"),
    (b'{"files": {"wandb-history.jsonl": {"offset": 0, "content": ["[1]"]}}}', 400, "not a JSON object"),
    (b'{"exitcode": "zero", "complete": true}', 400, "exitcode"),
])
def test_a_malformed_stream_is_refused_whole_with_the_reason(wandb_api, body, status, says):
    got, answer = wandb_api.stream("r1", body)
    assert (got, says in answer["errors"][0]["message"]) == (status, True), answer
    assert points() == [] and WandbRun.objects.get(name="r1").history_lines == 0


@pytest.mark.django_db(transaction=True)
def test_an_oversized_chunk_is_a_413_and_nothing_is_written(wandb_api, settings):
    big = history(0, *[{"_step": s, "pad": "x" * 1000, "v": 1.0} for s in range(13_000)])
    status, answer = wandb_api.stream("r1", big)
    assert status == 413 and "exceeds the limit" in answer["errors"][0]["message"]
    assert points() == []


@pytest.mark.django_db(transaction=True)
def test_graphql_refuses_what_it_does_not_serve_with_graphqls_own_errors(wandb_api):
    status, answer = wandb_api.graphql("{ viewer { id entity } }")
    assert status == 200 and answer["data"]["viewer"]["entity"]
    status, answer = wandb_api.graphql("{ viewer { secretField } }")
    assert status == 200 and "Cannot query field 'secretField' on type 'User'" in answer["errors"][0]["message"]
    status, answer = wandb_api.graphql("mutation { deleteRun(input: {id: \"x\"}) { success } }")
    assert status == 200 and "Cannot query field 'deleteRun'" in answer["errors"][0]["message"]
    status, answer = wandb_api.graphql("{ viewer { id ")
    assert status == 200 and "Syntax Error" in answer["errors"][0]["message"]
    status, answer = wandb_api.graphql(UPSERT, name="x" * 500, project="p")
    assert status == 200 and "at most 128 characters" in answer["errors"][0]["message"]
    status, answer = wandb_api.send("POST", "graphql", b'{"query": 5}')
    assert status == 200 and answer["errors"]
    status, answer = wandb_api.send("GET", "graphql")
    assert status == 405 and answer["errors"]
    status, answer = wandb_api.send("POST", "sdk/otel/v1/metrics", b"{}")  # the client's own telemetry
    assert status == 404 and "does not serve" in answer["errors"][0]["message"]
    status, answer = wandb_api.stream("nosuchrun", history(0, {"_step": 0, "a": 1}))
    assert status == 404 and "no run 'nosuchrun'" in answer["errors"][0]["message"]


@pytest.mark.django_db(transaction=True)
def test_credentials_that_are_not_a_token_are_a_401_in_json(wandb_api):
    for auth in ("", "Basic !!!", "Basic " + base64.b64encode(b"api:wrong").decode(),
                 "Basic " + base64.b64encode(b"api:opd_" + b"x" * 44).decode()):
        wandb_api.auth = auth
        status, answer = wandb_api.graphql("{ viewer { id } }")
        assert status == 401 and answer["errors"][0]["message"], (auth, answer)
        status, answer = wandb_api.stream("r1", history(0, {"_step": 0, "a": 1}))
        assert status == 401
    assert points() == []


@pytest.mark.django_db(transaction=True)
def test_an_upload_url_that_is_forged_or_for_a_revoked_token_is_refused(wandb_api, member):
    status, answer = wandb_api.graphql(
        'mutation { createRunFiles(input: {entityName: "", projectName: "p", runName: "r1", files: ["a.txt"]}) '
        "{ runID files { name uploadUrl } } }")
    assert status == 200, answer
    url = answer["data"]["createRunFiles"]["files"][0]["uploadUrl"]
    path = url.split("/wandb/", 1)[1]
    assert wandb_api.send("PUT", path, b"hello")[0] == 200
    status, answer = wandb_api.send("PUT", path[:-3] + "abc", b"forged")
    assert status == 403 and "not one this server signed" in answer["errors"][0]["message"]
    from opdweb.runs import mlflow_artifacts

    run = WandbRun.objects.get(name="r1").run
    with mlflow_artifacts.store().open(f"{mlflow_artifacts.run_prefix(run)}/wandb/a.txt") as fh:
        assert fh.read() == b"hello"
    from opdweb.tokens.actions import do_revoke_token
    from opdweb.tokens.models import ApiToken

    do_revoke_token(token=ApiToken.objects.get(name="trainer"), actor=member[0])
    status, answer = wandb_api.send("PUT", path, b"after revocation")
    assert status == 401 and "revoked" in answer["errors"][0]["message"]
    with mlflow_artifacts.store().open(f"{mlflow_artifacts.run_prefix(run)}/wandb/a.txt") as fh:
        assert fh.read() == b"hello"


@pytest.mark.django_db(transaction=True)
def test_the_run_link_the_client_prints_opens_the_runs_page_for_its_team_only(wandb_api, member, client, outsider):
    from opdweb.runs.models import WandbRun

    user, team = member
    job = WandbRun.objects.get(name="r1").run.job
    link = f"/wandb/{team.slug}/p/runs/r1"
    assert client.get(link).status_code == 302 and "/login/" in client.get(link)["Location"]
    client.force_login(user)
    assert client.get(link)["Location"] == f"/jobs/{job.pk}/"
    assert client.get(f"/wandb/{team.slug}/p/runs/nosuchrun").status_code == 404
    client.force_login(outsider)
    assert client.get(link).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_stop_run_asks_the_run_to_stop_through_its_file_stream(wandb_api):
    stopped = "query { project(name: \"p\") { run(name: \"r1\") { stopped } } }"
    status, answer = wandb_api.graphql(UPSERT, name="r1", project="p")
    storage_id = answer["data"]["upsertBucket"]["bucket"]["id"]
    assert wandb_api.graphql(stopped)[1]["data"]["project"]["run"]["stopped"] is False
    assert wandb_api.stream("r1", history(0, {"_step": 0, "a": 1}))[1]["stopped"] is False
    status, answer = wandb_api.graphql('mutation S($id: ID!) { stopRun(input: {id: $id}) { success } }',
                                       id=storage_id)
    assert status == 200 and answer["data"]["stopRun"]["success"] is True, answer
    assert wandb_api.graphql(stopped)[1]["data"]["project"]["run"]["stopped"] is True
    assert wandb_api.stream("r1", history(1, {"_step": 1, "a": 2}))[1]["stopped"] is True
    status, answer = wandb_api.graphql('mutation { stopRun(input: {id: "opdweb-run-nosuch"}) { success } }')
    assert "no run" in answer["errors"][0]["message"]


@pytest.mark.django_db(transaction=True)
def test_upserts_of_one_new_run_at_once_make_one_run(wandb_api):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: wandb_api.graphql(UPSERT, name="raced", project="p2"), range(8)))
    assert [status for status, _ in answers] == [200] * 8 and not any("errors" in a for _, a in answers), answers
    assert sum(a["data"]["upsertBucket"]["inserted"] for _, a in answers) == 1
    assert WandbRun.objects.filter(name="raced").count() == 1
