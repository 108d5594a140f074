"""One declaration makes a job kind: a kind registered in the science's registry shows in
the submit form, the API, the command line and the worker, with nothing else touched."""
import json

import pytest
from pydantic import BaseModel, ConfigDict, Field

from opdweb.jobs.models import Job, JobState
from opdweb.jobs.tasks import run_job
from opdweb.traces.models import TracePoint
from workers.science.cli import main as cli
from workers.science.entrypoints import KINDS, JobKind, register


class TriangleConfig(BaseModel):
    """Logs the triangular numbers: proves a kind needs one declaration."""

    model_config = ConfigDict(extra="forbid")
    count: int = Field(4, ge=1, le=100, description="how many numbers")


class TriangleResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    last: int


def run_triangle(config: TriangleConfig, reporter) -> TriangleResult:
    for n in range(1, config.count + 1):
        reporter.log(n, {"triangle/value": n * (n + 1) / 2})
    return TriangleResult(last=config.count * (config.count + 1) // 2)


def run_misshapen_triangle(config: TriangleConfig, reporter) -> dict:
    return {"lsat": config.count}  # not a TriangleResult


@pytest.fixture
def triangle_kind():
    kind = register(JobKind(name="triangle", config=TriangleConfig, result=TriangleResult,
                            entry=f"{__name__}:run_triangle", queue="cpu", time_limit_s=60,
                            example=lambda student: {"count": 7}))
    yield kind
    del KINDS["triangle"]


def test_it_shows_in_the_api_and_the_form(client, member, triangle_kind):
    user, _ = member
    client.force_login(user)
    listed = {k["name"]: k for k in client.get("/api/kinds").json()}
    assert listed["triangle"]["description"] == "Logs the triangular numbers: proves a kind needs one declaration."
    assert listed["triangle"]["queue"] == "cpu" and listed["triangle"]["time_limit_s"] == 60
    assert listed["triangle"]["config_schema"]["properties"]["count"]["maximum"] == 100
    page = client.get("/jobs/new/").content.decode()
    assert '<option value="triangle"' in page
    assert '"triangle": {"count": 7}' in page


def test_it_runs_from_the_command_line(triangle_kind, capsys):
    assert cli(["triangle", "--count", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"last": 15}
    assert cli(["triangle", "--count", "0"]) == 2
    assert "count: must be at least 1 (got '0')" in capsys.readouterr().err


def test_the_worker_task_runs_it(client, member, triangle_kind, transactional_db, monkeypatch):
    user, _ = member
    client.force_login(user)
    monkeypatch.setattr("opdweb.jobs.actions.enqueue", lambda job_id, attempt: None)
    response = client.post("/api/jobs", data=json.dumps({"kind": "triangle", "config": {"count": 4}}),
                           content_type="application/json")
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    assert run_job.apply(args=[job_id, 1]).get() == JobState.SUCCEEDED
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.SUCCEEDED and job.result == {"last": 10}
    values = list(TracePoint.objects.filter(series__job=job).order_by("step").values_list("step", "value"))
    assert values == [(1, 1.0), (2, 3.0), (3, 6.0), (4, 10.0)]


def test_a_result_that_is_not_the_kinds_fails_the_job_saying_why(client, member, triangle_kind, transactional_db,
                                                                  monkeypatch):
    from dataclasses import replace

    register(replace(triangle_kind, entry=f"{__name__}:run_misshapen_triangle"))
    user, _ = member
    client.force_login(user)
    monkeypatch.setattr("opdweb.jobs.actions.enqueue", lambda job_id, attempt: None)
    response = client.post("/api/jobs", data=json.dumps({"kind": "triangle", "config": {"count": 4}}),
                           content_type="application/json")
    job_id = response.json()["id"]
    assert run_job.apply(args=[job_id, 1]).get() == JobState.FAILED
    job = Job.objects.get(pk=job_id)
    assert job.result is None
    assert job.error.startswith("MalformedResult: the triangle job's result is not a TriangleResult: ")
    assert "last: Field required" in job.error and "lsat: Extra inputs are not permitted" in job.error
