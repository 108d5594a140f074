"""Hostile input gets a 4xx with a JSON message naming the problem, never a 500, and
writes nothing: NUL characters (PostgreSQL cannot store them), JSON nested 1,000 deep,
integers of 5,000 digits, chunked bodies over the limit, ids that are not numbers."""
import http.client
import json

import pytest
from django.test import RequestFactory
from django.urls import get_resolver

from opdweb.jobs.models import Job
from tests.web.factories import JobFactory

pytestmark = pytest.mark.django_db

DEEP = "[" * 1000 + "]" * 1000
HUGE_INT = "1" + "0" * 4999


@pytest.fixture
def api(client, member, monkeypatch):
    """A logged-in member's client; enqueueing is recorded instead of sent (no worker here)."""
    user, team = member
    client.force_login(user)
    monkeypatch.setattr("opdweb.jobs.actions.enqueue", lambda job_id, attempt: None)
    client.team = team
    return client


def post_raw(client, url, text):
    return client.post(url, data=text, content_type="application/json")


def test_it_refuses_a_nul_in_a_query_parameter(api):
    response = api.get("/api/jobs?kind=%00")
    assert response.status_code == 400
    assert response.json() == {"detail": "query parameter 'kind' contains a NUL character",
                               "errors": [{"field": "kind", "message": "contains a NUL character"}]}


def test_it_refuses_a_nul_in_the_export_key(api):
    job = JobFactory(team=api.team)
    response = api.get(f"/api/jobs/{job.pk}/export?key=%00")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json()["errors"] == [{"field": "key", "message": "contains a NUL character"}]


def test_it_refuses_a_nul_in_the_job_name(api):
    response = post_raw(api, "/api/jobs", '{"kind": "selftest", "name": "a\\u0000b"}')
    assert response.status_code == 400
    assert response.json() == {"detail": "request body: name contains a NUL character",
                               "errors": [{"field": "name", "message": "contains a NUL character"}]}
    assert Job.objects.count() == 0


def test_it_refuses_a_nul_in_a_config_string(api):
    response = post_raw(api, "/api/jobs", '{"kind": "mismatch", "config": {"model": "/srv/m\\u0000"}}')
    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": "config.model", "message": "contains a NUL character"}]
    assert Job.objects.count() == 0


def test_it_refuses_a_nul_in_a_config_key(api):
    response = post_raw(api, "/api/jobs", '{"kind": "selftest", "config": {"st\\u0000eps": 3}}')
    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": "config", "message": "a field name contains a NUL character"}]


def test_it_refuses_json_nested_1000_deep(api):
    response = post_raw(api, "/api/jobs", '{"kind": "selftest", "config": {"steps": ' + DEEP + "}}")
    assert response.status_code == 400
    assert response.json()["detail"] == "request body is nested deeper than 64 levels"
    assert Job.objects.count() == 0


def test_it_refuses_json_nested_just_past_the_limit(api):
    # 66 levels: Python's decoder manages it, the iterative check refuses it.
    response = post_raw(api, "/api/jobs", '{"kind": "selftest", "config": {"steps": ' + "[" * 64 + "]" * 64 + "}}")
    assert response.status_code == 400
    assert response.json()["detail"] == "request body is nested deeper than 64 levels"


def test_it_refuses_a_5000_digit_integer(api):
    response = post_raw(api, "/api/jobs", '{"kind": "selftest", "config": {"steps": ' + HUGE_INT + "}}")
    assert response.status_code == 400
    assert response.json()["detail"] == "request body holds an integer longer than 4300 digits"
    assert Job.objects.count() == 0


def test_it_refuses_a_5000_digit_integer_in_the_query(api):
    response = api.get("/api/jobs?limit=" + HUGE_INT)
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["limit"]


@pytest.mark.parametrize("number", ["1e999", "NaN", "-Infinity"])
def test_it_refuses_numbers_postgresql_cannot_store(api, number):
    response = post_raw(api, "/api/jobs", '{"kind": "selftest", "config": {"sleep_s": ' + number + "}}")
    assert response.status_code == 400
    assert Job.objects.count() == 0


def test_it_refuses_an_unknown_query_parameter(api):
    response = api.get("/api/jobs?limit=5&colour=red")
    assert response.status_code == 400
    assert response.json()["detail"] == "unknown query parameter 'colour'; this endpoint takes kind, state, limit"


def test_it_refuses_a_boolean_where_the_schema_says_integer(api):
    response = post_raw(api, "/api/jobs", '{"kind": "selftest", "config": {"steps": true}}')
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["steps"]
    assert Job.objects.count() == 0


def test_a_form_body_to_the_api_is_a_400(api):
    response = api.post("/api/jobs", {"kind": "selftest"})  # multipart, as a browser form would send it
    assert response.status_code == 400
    assert response.json()["detail"].startswith("request body is not valid JSON")


def test_a_non_integer_id_under_api_is_a_json_404(api):
    response = api.get("/api/jobs/abc")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "/api/jobs/abc not found", "errors": []}


def test_a_page_404_stays_a_page(api):
    response = api.get("/jobs/abc/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_a_500_under_api_is_json_without_a_traceback():
    handler = get_resolver().resolve_error_handler(500)
    response = handler(RequestFactory().get("/api/jobs"))
    assert response.status_code == 500
    assert json.loads(response.content) == {"detail": "internal error; it has been logged", "errors": []}


def test_a_missing_csrf_token_under_api_is_a_json_403(member):
    from django.test import Client

    user, _ = member
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.post("/api/jobs", data="{}", content_type="application/json")
    assert response.status_code == 403
    assert response.json()["detail"].startswith("CSRF check failed: CSRF cookie not set")


# The form.

def submit_form(client, config, name=""):
    return client.post("/jobs/new/", {"kind": "selftest", "config": config, "name": name, "team": client.team.slug})


def test_the_form_refuses_json_nested_1000_deep(api):
    response = submit_form(api, '{"steps": ' + DEEP + "}")
    assert response.status_code == 400
    assert "config is nested deeper than 64 levels" in response.content.decode()
    assert Job.objects.count() == 0


def test_the_form_refuses_a_5000_digit_integer(api):
    response = submit_form(api, '{"steps": ' + HUGE_INT + "}")
    assert response.status_code == 400
    assert "config holds an integer longer than 4300 digits" in response.content.decode()
    assert Job.objects.count() == 0


def test_the_form_refuses_a_nul_in_the_name_or_config(api):
    response = submit_form(api, '{"steps": 3}', name="a\x00b")
    assert response.status_code == 400
    assert response.content.decode() == "form field 'name' contains a NUL character"
    response = submit_form(api, '{"steps": "\\u0000"}')
    assert response.status_code == 400
    assert "config: steps contains a NUL character" in response.content.decode()
    assert Job.objects.count() == 0


def test_the_login_form_refuses_a_nul(client):
    response = client.post("/login/", {"username": "root\x00", "password": "x"})
    assert response.status_code == 400
    assert response.content.decode() == "form field 'username' contains a NUL character"


def test_an_admin_filter_with_a_nul_is_a_400_not_a_500(client):
    from django.contrib.auth import get_user_model

    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw-root-123"))
    response = client.get("/admin/jobs/job/?state__exact=%00")
    assert response.status_code == 400
    assert response.content.decode() == "query parameter 'state__exact' contains a NUL character"


# Against daphne: what only the real server shows.

def test_a_chunked_body_over_the_limit_gets_the_json_413(asgi_server):
    host, port = asgi_server.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    chunk = b"x" * 65536
    conn.request("POST", "/api/jobs", body=iter([chunk] * 5), headers={"Content-Type": "application/json"},
                 encode_chunked=True)
    response = conn.getresponse()
    assert response.status == 413
    assert json.loads(response.read()) == {"detail": "request body exceeds the limit of 262144 bytes", "errors": []}


def test_a_chunked_body_under_the_limit_still_arrives(asgi_server):
    host, port = asgi_server.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", "/api/jobs", body=iter([b'{"kind": ', b'"selftest"}']),
                 headers={"Content-Type": "application/json"},
                 encode_chunked=True)
    response = conn.getresponse()
    # Read whole (no 413); refused next for its missing CSRF token, in JSON.
    assert response.status == 403
    assert json.loads(response.read())["detail"].startswith("CSRF check failed")


def test_the_export_with_a_nul_key_answers_at_once(asgi_server, member):
    from django.test import Client

    user, team = member
    job = JobFactory(team=team)
    browser = Client()
    browser.force_login(user)
    host, port = asgi_server.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)  # it used to answer 200, then hang
    conn.request("GET", f"/api/jobs/{job.pk}/export?key=%00",
                 headers={"Cookie": f"sessionid={browser.cookies['sessionid'].value}"})
    response = conn.getresponse()
    assert response.status == 400
    assert json.loads(response.read())["errors"] == [{"field": "key", "message": "contains a NUL character"}]


def test_an_unknown_config_field_in_a_job_names_the_closest_field(member, client):
    user, _ = member
    client.force_login(user)
    response = client.post("/api/jobs", data={"kind": "selftest", "config": {"stpes": 3}},
                           content_type="application/json")
    assert response.status_code == 400
    assert {"field": "stpes", "message": "unknown field; did you mean 'steps'?"} in response.json()["errors"]
