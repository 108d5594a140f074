"""The jobs API: submission, bad input, team scoping, cancellation."""
import json

import pytest

from opdweb.jobs.models import Job, JobState
from opdweb.teams.models import Role
from tests.web.factories import JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(client, member, monkeypatch):
    """A logged-in member's client; enqueueing is recorded instead of sent (no worker here)."""
    user, team = member
    client.force_login(user)
    sent = []
    monkeypatch.setattr("opdweb.jobs.actions.enqueue", lambda job_id, attempt: sent.append((job_id, attempt)))
    client.sent = sent
    client.team = team
    return client


def post_json(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def test_it_creates_a_queued_job_with_the_normalised_config(api, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = post_json(api, "/api/jobs", {"kind": "selftest", "config": {"steps": 5}, "name": "smoke"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == "queued" and body["team"] == api.team.slug and body["name"] == "smoke"
    assert body["config"] == {"steps": 5, "sleep_s": 0.0, "fail_at_step": None, "log_every": None}
    assert api.sent == [(body["id"], 1)]


def test_it_refuses_an_unknown_kind(api):
    response = post_json(api, "/api/jobs", {"kind": "bake_a_cake", "config": {}})
    assert response.status_code == 400
    assert "unknown job kind 'bake_a_cake'" in response.json()["detail"]
    assert Job.objects.count() == 0 and api.sent == []


def test_it_refuses_malformed_json(api):
    response = api.post("/api/jobs", data='{"kind": "selftest", "config": {', content_type="application/json")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("request body is not valid JSON")
    assert Job.objects.count() == 0


def test_it_refuses_a_config_that_is_not_an_object(api):
    response = post_json(api, "/api/jobs", {"kind": "selftest", "config": [1, 2]})
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["config"]
    assert Job.objects.count() == 0


def test_it_names_the_bad_field(api):
    response = post_json(api, "/api/jobs", {"kind": "selftest", "config": {"steps": -3, "colour": "red"}})
    assert response.status_code == 400
    fields = {e["field"] for e in response.json()["errors"]}
    assert fields == {"steps", "colour"}
    assert Job.objects.count() == 0


def test_it_refuses_an_oversized_body_with_413(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = post_json(api, "/api/jobs", {"kind": "selftest", "config": {"steps": 5}, "name": "x" * 20_000})
    assert response.status_code == 413
    assert "exceeds the limit" in response.json()["detail"]
    assert Job.objects.count() == 0


def test_it_refuses_an_oversized_config_with_413(api, settings):
    config = {"steps": 5, "sleep_s": 0.5}
    settings.JOB_CONFIG_MAX_BYTES = len(json.dumps(config)) - 1
    response = post_json(api, "/api/jobs", {"kind": "selftest", "config": config})
    assert response.status_code == 413
    assert f"larger than {settings.JOB_CONFIG_MAX_BYTES} bytes" in response.json()["detail"]
    assert Job.objects.count() == 0


def test_it_refuses_a_viewer(client, member, make_user):
    _, team = member
    viewer = make_user(team, Role.VIEWER)
    client.force_login(viewer)
    response = post_json(client, "/api/jobs", {"kind": "selftest", "config": {}})
    assert response.status_code == 403
    assert Job.objects.count() == 0


def test_it_requires_a_login(client):
    assert client.get("/api/jobs").status_code == 401


def test_it_hides_other_teams_jobs(api, outsider):
    mine = JobFactory(team=api.team)
    theirs = JobFactory(team=outsider.memberships.get().team)
    assert [j["id"] for j in api.get("/api/jobs").json()] == [mine.pk]
    assert api.get(f"/api/jobs/{theirs.pk}").status_code == 404
    assert api.post(f"/api/jobs/{theirs.pk}/cancel").status_code == 404
    theirs.refresh_from_db()
    assert theirs.state == JobState.QUEUED


def test_a_second_cancel_is_a_conflict(api):
    job = JobFactory(team=api.team)
    first = api.post(f"/api/jobs/{job.pk}/cancel")
    assert first.status_code == 200 and first.json()["state"] == "cancelled"
    second = api.post(f"/api/jobs/{job.pk}/cancel")
    assert second.status_code == 409
    assert "already cancelled" in second.json()["detail"]


def test_cancelling_a_running_job_asks_it_to_stop(api):
    job = JobFactory(team=api.team, state=JobState.RUNNING)
    response = api.post(f"/api/jobs/{job.pk}/cancel")
    assert response.status_code == 200
    assert response.json()["cancel_requested"] is True and response.json()["state"] == "running"
    assert api.post(f"/api/jobs/{job.pk}/cancel").status_code == 409


def test_the_openapi_schema_lists_the_job_endpoints(api):
    schema = api.get("/api/openapi.json").json()
    assert {"/api/jobs", "/api/jobs/{job_id}", "/api/jobs/{job_id}/cancel"} <= set(schema["paths"])


def test_the_form_shows_a_clear_error_for_bad_json(api):
    response = api.post("/jobs/new/", {"team": api.team.slug, "kind": "selftest", "config": "{nope", "name": ""})
    assert response.status_code == 400
    assert b"config is not valid JSON" in response.content
    assert Job.objects.count() == 0


def test_a_bad_query_parameter_is_a_400_naming_it(api):
    job = JobFactory(team=api.team)
    response = api.get(f"/api/jobs/{job.pk}/series/downsampled?key=a&buckets=0")
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["buckets"]
    assert api.get("/api/jobs?limit=lots").status_code == 400


def test_an_unknown_body_field_and_a_wrong_method_are_refused(api):
    response = post_json(api, "/api/jobs", {"kind": "selftest", "config": {}, "priority": "urgent"})
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "priority"
    response = api.delete("/api/jobs")
    assert response.status_code == 405 and response["Allow"] == "GET, POST"
    assert Job.objects.count() == 0


def test_the_openapi_document_describes_bodies_queries_and_problems(api):
    schema = api.get("/api/openapi.json").json()
    post = schema["paths"]["/api/jobs"]["post"]
    # 503: broker down; 429: a token past its write rate
    assert set(post["responses"]) == {"201", "400", "401", "403", "413", "429", "503"}
    body = post["requestBody"]["content"]["application/json"]["schema"]
    assert body["discriminator"]["propertyName"] == "kind"  # one alternative per kind, with its config schema
    selftest = schema["components"]["schemas"]["SelftestSubmission"]
    assert set(selftest["properties"]) == {"kind", "config", "name", "team"}
    params = {p["name"] for p in schema["paths"]["/api/jobs/{job_id}/series/downsampled"]["get"]["parameters"]}
    assert params == {"job_id", "key", "buckets", "start", "end", "wall"}


def test_a_submission_and_a_cancellation_are_audited_and_a_refused_one_is_not(api):
    from opdweb.teams.models import AuditEntry

    response = post_json(api, "/api/jobs", {"kind": "selftest", "name": "audited", "config": {"steps": 3}})
    job_id = response.json()["id"]
    assert post_json(api, "/api/jobs", {"kind": "selftest", "config": {"steps": "many"}}).status_code == 400
    assert api.post(f"/api/jobs/{job_id}/cancel").status_code == 200
    assert api.post(f"/api/jobs/{job_id}/cancel").status_code == 409  # refused: nothing to record
    entries = list(AuditEntry.objects.filter(team=api.team).order_by("id").values_list("action", "subject_id",
                                                                                       "summary"))
    assert entries == [("job.submitted", job_id, f"submitted selftest job #{job_id} (audited)"),
                       ("job.cancelled", job_id, f"cancelled selftest job #{job_id}")]
