"""What the product shows to whom: /healthz keeps its details for staff, the status page
counts only the viewer's teams' jobs, tracebacks are for members and up."""
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from opdweb.health.models import WorkerPresence
from opdweb.teams.models import Role
from tests.web.factories import JobFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

TRACEBACK = 'Traceback (most recent call last):\n  File "/srv/opdweb/secret_module.py", line 7\nRuntimeError: boom'
UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"


def a_live_worker():
    now = timezone.now()
    WorkerPresence.objects.create(name="gpu0@box-17", hostname="box-17", pid=1, queues=["gpu"], device="cpu",
                                  started_at=now, last_seen=now)


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_user("ops", is_staff=True)


def test_it_tells_anonymous_callers_only_ok(client):
    a_live_worker()
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_it_tells_anonymous_callers_only_degraded(client, settings):
    a_live_worker()
    settings.REDIS_URL = UNREACHABLE_REDIS
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"status": "degraded"}
    assert b"127.0.0.1" not in response.content and b"box-17" not in response.content


def test_it_keeps_details_from_a_logged_in_non_staff_user(client, member):
    a_live_worker()
    client.force_login(member[0])
    assert client.get("/healthz").json() == {"status": "ok"}


def test_it_gives_staff_the_details(client, settings, staff):
    a_live_worker()
    settings.REDIS_URL = UNREACHABLE_REDIS
    client.force_login(staff)
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded" and body["database"] == "ok" and body["workers"] == ["gpu0@box-17"]
    assert body["redis"].startswith("ConnectionError") and "127.0.0.1:1" in body["redis"]


def test_the_status_page_keeps_raw_errors_for_staff(client, settings, member, staff):
    settings.REDIS_URL = UNREACHABLE_REDIS
    client.force_login(member[0])
    page = client.get("/status/").content.decode()
    assert "Redis: <b class=\"bad\">unavailable</b>" in page and "127.0.0.1:1" not in page
    client.force_login(staff)
    assert "127.0.0.1:1" in client.get("/status/").content.decode()


def jobs_in(team, running, queued) -> list:
    return ([JobFactory(team=team, state="running") for _ in range(running)]
            + [JobFactory(team=team, state="queued") for _ in range(queued)])


def counts_on_status_page(client) -> str:
    page = client.get("/status/").content.decode()
    return page.split('<span id="job-counts">')[1].split("</span>")[0]


def test_the_status_page_shows_a_teamless_user_no_job_counts_of_other_teams(client):
    jobs_in(TeamFactory(), running=2, queued=3)
    client.force_login(UserFactory())
    assert counts_on_status_page(client) == "0 running, 0 queued, 0 waiting for their child jobs"


def test_the_status_page_counts_only_the_users_teams(client, member):
    user, team = member
    own = jobs_in(team, running=1, queued=1)
    others = jobs_in(TeamFactory(), running=2, queued=3)
    client.force_login(user)
    assert counts_on_status_page(client) == "1 running, 1 queued, 0 waiting for their child jobs"
    # The running and next-in-line lists name the team's own jobs and only count the others'.
    page = client.get("/status/").content.decode()
    assert all(f'href="/jobs/{job.pk}/"' in page for job in own)
    assert not any(f'href="/jobs/{job.pk}/"' in page for job in others)
    assert "2 of other teams</td>" in page and "3 of other teams among the next 20" in page


def test_the_status_page_counts_every_team_for_staff(client, member, staff):
    jobs_in(member[1], running=1, queued=1)
    jobs_in(TeamFactory(), running=2, queued=3)
    client.force_login(staff)
    assert counts_on_status_page(client) == "3 running, 4 queued, 0 waiting for their child jobs"


@pytest.fixture
def failed_job(member):
    _, team = member
    return JobFactory(team=team, state="failed", error="RuntimeError: boom", traceback=TRACEBACK)


def test_a_viewer_sees_the_error_but_not_the_traceback(client, failed_job, make_user):
    client.force_login(make_user(failed_job.team, Role.VIEWER))
    page = client.get(f"/jobs/{failed_job.pk}/").content.decode()
    assert "RuntimeError: boom" in page and "secret_module.py" not in page
    body = client.get(f"/api/jobs/{failed_job.pk}").json()
    assert body["error"] == "RuntimeError: boom" and body["traceback"] is None
    listed = client.get("/api/jobs").json()
    assert [(j["id"], j["traceback"]) for j in listed] == [(failed_job.pk, None)]


def test_a_member_sees_the_traceback(client, failed_job, member):
    client.force_login(member[0])
    assert "secret_module.py" in client.get(f"/jobs/{failed_job.pk}/").content.decode()
    assert client.get(f"/api/jobs/{failed_job.pk}").json()["traceback"] == TRACEBACK
    assert client.get("/api/jobs").json()[0]["traceback"] == TRACEBACK


def test_a_staff_viewer_sees_the_traceback(client, failed_job, make_user):
    viewer = make_user(failed_job.team, Role.VIEWER)
    viewer.is_staff = True
    viewer.save()
    client.force_login(viewer)
    assert "secret_module.py" in client.get(f"/jobs/{failed_job.pk}/").content.decode()
    assert client.get(f"/api/jobs/{failed_job.pk}").json()["traceback"] == TRACEBACK


def test_the_openapi_document_stays_public(client):
    response = client.get("/api/openapi.json")
    assert response.status_code == 200
    assert response.json()["openapi"] == "3.1.0"


def test_with_the_database_unreachable_every_answer_is_a_quick_503(start_asgi_server):
    """A daphne whose database does not answer: /healthz says degraded (a session cookie
    changes nothing), the API answers its JSON problem and pages a plain 503, each within
    the connect timeout, none a 500 or a traceback."""
    import http.client
    import json as json_lib
    import time as time_lib

    from opdweb.embedded_servers import free_port

    host, port = start_asgi_server(DATABASE_URL=f"postgres://nobody@127.0.0.1:{free_port()}/none",
                                   DB_CONNECT_TIMEOUT_S="2").split(":")
    session = "sessionid=" + "a1" * 16  # well formed, so the session is looked up in the database
    for path, cookie in [("/healthz", ""), ("/healthz", session), ("/api/jobs", session), ("/jobs/", session)]:
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        started = time_lib.monotonic()
        connection.request("GET", path, headers={"Cookie": cookie} if cookie else {})
        response = connection.getresponse()
        body, took = response.read().decode(), time_lib.monotonic() - started
        assert response.status == 503, (path, cookie, response.status, body[:300])
        assert took < 15, (path, took)
        if path == "/healthz":
            assert json_lib.loads(body) == {"status": "degraded"}
        elif path.startswith("/api/"):
            assert json_lib.loads(body)["detail"].startswith("the database is unreachable")
        else:
            assert body.startswith("the database is unreachable") and "Traceback" not in body


def test_a_silent_database_costs_a_request_the_connect_timeout_then_a_503_with_retry_after(start_asgi_server):
    """A database host that takes the TCP connection and never answers (a hung server, a
    black-holed route): each answer within the pool's wait (``DB_CONNECT_TIMEOUT_S`` + 2 s,
    the margin a pool refill after a restart needs) plus the time to answer, never a hang;
    every 503 says when to try again."""
    import http.client
    import json as json_lib
    import socket
    import time as time_lib

    timeout_s = 2
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # the kernel completes the handshakes; nothing ever answers
        host, port = start_asgi_server(DATABASE_URL=f"postgres://nobody@127.0.0.1:{silent.getsockname()[1]}/none",
                                       DB_CONNECT_TIMEOUT_S=str(timeout_s)).split(":")
        session = "sessionid=" + "a1" * 16
        for path, method in [("/api/jobs", "GET"), ("/jobs/", "GET"),
                             ("/mlflow/api/2.0/mlflow/runs/get?run_id=ab", "GET")]:
            connection = http.client.HTTPConnection(host, int(port), timeout=60)
            started = time_lib.monotonic()
            connection.request(method, path, headers={"Cookie": session, "Authorization": "Bearer opd_x"})
            response = connection.getresponse()
            body, took = response.read().decode(), time_lib.monotonic() - started
            assert response.status == 503, (path, response.status, body[:300])
            assert response.getheader("Retry-After") == "5", path
            assert took < timeout_s + 2 + 1.5, (path, took)
            if path.startswith("/mlflow/"):
                assert json_lib.loads(body)["error_code"] == "TEMPORARILY_UNAVAILABLE"


@pytest.mark.django_db
def test_every_page_carries_a_content_security_policy_without_inline_script(client):
    from opdweb.csp import POLICY

    response = client.get("/login/")
    policy = response["Content-Security-Policy"]
    assert policy == POLICY
    directives = dict(d.split(" ", 1) for d in policy.split("; "))
    assert directives["script-src"] == "'self'" and "unsafe-inline" not in directives["script-src"]
    assert directives["frame-ancestors"] == "'none'" and directives["object-src"] == "'none'"
    assert client.get("/healthz")["Content-Security-Policy"] == POLICY


def test_no_template_holds_an_inline_script_or_handler():
    """What the policy forbids, looked for in the templates themselves: a <script> without
    src (JSON data blocks are not run), an on* handler, a javascript: URL."""
    import re
    from pathlib import Path

    offending = []
    for template in (Path(__file__).resolve().parents[2] / "templates").rglob("*.html"):
        text = template.read_text()
        for tag in re.findall(r"<script\b[^>]*>", text):
            if "src=" not in tag and 'type="application/json"' not in tag:
                offending.append(f"{template.name}: {tag}")
        offending += [f"{template.name}: {m}" for m in re.findall(r"\son[a-z]+=|javascript:", text)]
    assert offending == []
