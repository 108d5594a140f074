"""API tokens: made and revoked on the tokens page, stored as a digest, accepted as
``Authorization: Bearer`` by the JSON API beside the session; every refusal says why and
writes nothing."""
import hashlib
import json

import pytest
from django.test import Client, override_settings

from opdweb.jobs.models import Job
from opdweb.refusals import Refused
from opdweb.teams.models import AuditEntry, Role
from opdweb.tokens.actions import do_create_token, do_revoke_token
from opdweb.tokens.models import ApiToken
from opdweb.tokens.rate_limit import take_write
from tests.web.factories import JobFactory, MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db

SELFTEST = {"kind": "selftest", "config": {"steps": 3}}


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    """Submitting enqueues on commit; there is no worker here."""
    monkeypatch.setattr("opdweb.jobs.actions.enqueue", lambda job_id, attempt: None)


def bearer(secret: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def submit(client: Client, headers: dict, team: str | None = None):
    body = {**SELFTEST, **({"team": team} if team else {})}
    return client.post("/api/jobs", data=json.dumps(body), content_type="application/json", **headers)


@pytest.fixture
def write_secret(member):
    user, team = member
    return do_create_token(user=user, team=team, name="ci", can_write=True)[1]


def test_it_submits_and_reads_with_a_read_write_token_and_no_csrf_token(member, write_secret):
    user, team = member
    client = Client(enforce_csrf_checks=True)
    response = submit(client, bearer(write_secret))
    assert response.status_code == 201, response.content
    job = Job.objects.get()
    assert job.team == team and job.created_by == user
    response = client.get(f"/api/jobs/{job.pk}", **bearer(write_secret))
    assert response.status_code == 200 and response.json()["id"] == job.pk
    assert ApiToken.objects.get().last_used_at is not None


def test_it_stores_only_the_digest_of_a_secret_that_says_what_it_is(member, write_secret):
    token = ApiToken.objects.get()
    assert write_secret.startswith("opd_") and len(write_secret) >= 40
    assert token.digest == hashlib.sha256(write_secret.encode()).hexdigest()
    assert write_secret not in json.dumps(list(ApiToken.objects.values()), default=str)


@pytest.mark.parametrize("header, reason", [
    ("Bearer opd_not-a-real-token-at-all", "unknown API token"),
    ("Bearer", "must be 'Bearer <token>'"),
    ("Basic dXNlcjpwYXNz", "must be 'Bearer <token>'"),
    ("Bearer ghp_somebody-elses-token", "not an opdweb API token"),
])
def test_it_refuses_an_unknown_or_garbled_token_with_401_and_the_reason(member, header, reason):
    response = submit(Client(), {"HTTP_AUTHORIZATION": header})
    assert response.status_code == 401
    assert reason in response.json()["detail"]
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert Job.objects.count() == 0


def test_a_revoked_token_is_refused_with_401_saying_so(member, write_secret):
    user, _ = member
    do_revoke_token(token=ApiToken.objects.get(), actor=user)
    response = submit(Client(), bearer(write_secret))
    assert response.status_code == 401 and "was revoked" in response.json()["detail"]
    assert Client().get("/api/jobs", **bearer(write_secret)).status_code == 401
    assert Job.objects.count() == 0


def test_a_read_only_token_reads_and_is_refused_writing_with_403(member):
    user, team = member
    _, secret = do_create_token(user=user, team=team, name="dashboard", can_write=False)
    job = JobFactory(team=team)
    assert Client().get(f"/api/jobs/{job.pk}", **bearer(secret)).status_code == 200
    response = submit(Client(), bearer(secret))
    assert response.status_code == 403 and "read-only" in response.json()["detail"]
    response = Client().post(f"/api/jobs/{job.pk}/cancel", **bearer(secret))
    assert response.status_code == 403 and "read-only" in response.json()["detail"]
    assert Job.objects.count() == 1 and Job.objects.get().state == "queued"


def test_a_token_reaches_its_own_team_only(member, write_secret):
    """The owner is in two teams; the token is for one: the other team's jobs are refused
    with a 403 naming both teams, its list leaves them out, and it cannot submit there."""
    user, team = member
    other = MembershipFactory(user=user, team=TeamFactory(), role=Role.ADMIN).team
    theirs, ours = JobFactory(team=other), JobFactory(team=team)
    response = Client().get(f"/api/jobs/{theirs.pk}", **bearer(write_secret))
    assert response.status_code == 403
    assert team.slug in response.json()["detail"] and other.slug in response.json()["detail"]
    listed = [j["id"] for j in Client().get("/api/jobs", **bearer(write_secret)).json()]
    assert listed == [ours.pk]
    response = submit(Client(), bearer(write_secret), team=other.slug)
    assert response.status_code == 403
    response = Client().post(f"/api/jobs/{theirs.pk}/cancel", **bearer(write_secret))
    assert response.status_code == 403 and Job.objects.get(pk=theirs.pk).state == "queued"
    assert Job.objects.count() == 2
    # The session still reaches both.
    client = Client()
    client.force_login(user)
    assert client.get(f"/api/jobs/{theirs.pk}").status_code == 200


def test_another_teams_job_stays_hidden_from_a_token_whose_owner_is_not_in_it(member, write_secret):
    stranger = JobFactory(team=TeamFactory())
    assert Client().get(f"/api/jobs/{stranger.pk}", **bearer(write_secret)).status_code == 404


def test_a_token_whose_owner_left_the_team_is_refused_with_403(member, write_secret):
    user, team = member
    team.memberships.filter(user=user).delete()
    response = Client().get("/api/jobs", **bearer(write_secret))
    assert response.status_code == 403 and "no longer in" in response.json()["detail"]


def test_the_session_still_works_and_still_needs_its_csrf_token(member):
    user, _ = member
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = submit(client, {})
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]
    assert Job.objects.count() == 0
    client.get("/jobs/")  # a page sets the csrftoken cookie
    response = submit(client, {"HTTP_X_CSRFTOKEN": client.cookies["csrftoken"].value})
    assert response.status_code == 201, response.content
    assert Client().get("/api/jobs").status_code == 401  # neither a session nor a token


@override_settings(API_TOKEN_WRITES_PER_MINUTE=0)
def test_a_write_past_the_tokens_rate_gets_429_with_retry_after_and_writes_nothing(member, write_secret):
    response = submit(Client(), bearer(write_secret))
    assert response.status_code == 429 and "writes this minute" in response.json()["detail"]
    assert 1 <= int(response["Retry-After"]) <= 60
    assert Job.objects.count() == 0
    assert Client().get("/api/jobs", **bearer(write_secret)).status_code == 200  # reads are not limited


@override_settings(API_TOKEN_WRITES_PER_MINUTE=3)
def test_the_rate_counts_each_tokens_writes_per_minute_in_redis(member, write_secret):
    token = ApiToken.objects.get()
    minute = 1_800_000_000 // 60 * 60  # the start of some minute
    for second in (0, 10, 20):
        take_write(token.pk, now=minute + second)
    with pytest.raises(Refused) as refused:
        take_write(token.pk, now=minute + 45.5)
    assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "15"}
    take_write(token.pk, now=minute + 60)  # a new minute, a new count
    other = do_create_token(user=token.user, team=token.team, name="other", can_write=True)[0]
    take_write(other.pk, now=minute + 50)  # another token's count is its own


def test_the_openapi_document_lists_the_bearer_scheme(client):
    schema = client.get("/api/openapi.json").json()
    schemes = schema["components"]["securitySchemes"]
    assert schemes["bearer"]["type"] == "http" and schemes["bearer"]["scheme"] == "bearer"
    assert {"bearer": []} in schema["security"] and {"session": []} in schema["security"]


# -- the tokens page ----------------------------------------------------------------------

def test_the_page_shows_a_new_secret_once_and_audits_creation_and_revocation(member):
    user, team = member
    client = Client()
    client.force_login(user)
    response = client.post("/tokens/", {"name": "cluster-a verl", "team": team.slug, "scope": "write"})
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    token = ApiToken.objects.get()
    secret = response.context["secret"]
    assert secret.encode() in response.content and token.can_write and token.team == team
    assert hashlib.sha256(secret.encode()).hexdigest() == token.digest
    page = client.get("/tokens/")
    assert secret.encode() not in page.content and b"cluster-a verl" in page.content
    response = client.post(f"/tokens/{token.pk}/revoke/")
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.is_revoked
    actions = list(AuditEntry.objects.filter(team=team, subject="token", subject_id=token.pk)
                   .order_by("id").values_list("action", flat=True))
    assert actions == ["token.created", "token.revoked"]
    assert client.post(f"/tokens/{token.pk}/revoke/").status_code == 409  # once


def test_a_viewer_may_make_only_read_only_tokens(make_user):
    team = TeamFactory()
    viewer = make_user(team, Role.VIEWER)
    client = Client()
    client.force_login(viewer)
    response = client.post("/tokens/", {"name": "mine", "team": team.slug, "scope": "write"})
    assert response.status_code == 403 and ApiToken.objects.count() == 0
    response = client.post("/tokens/", {"name": "mine", "team": team.slug, "scope": "read"})
    assert response.status_code == 200 and not ApiToken.objects.get().can_write


def test_nobody_else_can_revoke_a_token(member, write_secret, outsider):
    client = Client()
    client.force_login(outsider)
    token = ApiToken.objects.get()
    assert client.post(f"/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert not token.is_revoked


def test_a_team_admin_sees_and_may_revoke_a_members_token(member, write_secret, make_user):
    _, team = member
    admin = make_user(team, Role.ADMIN)
    client = Client()
    client.force_login(admin)
    token = ApiToken.objects.get()
    assert token.hint.encode() in client.get("/tokens/").content
    assert client.post(f"/tokens/{token.pk}/revoke/").status_code == 302
    assert AuditEntry.objects.get(action="token.revoked").actor == admin
    assert submit(Client(), bearer(write_secret)).status_code == 401


def test_chart_reads_follow_the_jobs_rule_for_a_token_and_a_stranger(member, write_secret):
    """Chart reads find the series and the job's team in one query: the rule they apply is
    the job's.  A token for another of the owner's teams gets the job's 403 (naming both
    teams); someone outside the team gets the job's own 404, the same whether or not the
    key exists; a member asking a key the job lacks gets a 404 naming the key."""
    from opdweb.traces.sink import TraceSink

    user, team = member
    other = MembershipFactory(user=user, team=TeamFactory(), role=Role.ADMIN).team
    theirs = JobFactory(team=other)
    sink = TraceSink(theirs.pk, publish=None)
    sink.add(0, {"loss": 1.0})
    sink.close()
    read = f"/api/jobs/{theirs.pk}/series/downsampled?key="
    batch = f"/api/jobs/{theirs.pk}/series/batch?key="
    for path in (read + "loss", batch + "loss"):
        response = Client().get(path, **bearer(write_secret))
        assert response.status_code == 403, path
        assert team.slug in response.json()["detail"] and other.slug in response.json()["detail"]
    stranger = Client()
    stranger.force_login(MembershipFactory(team=TeamFactory()).user)
    answers = [stranger.get(path) for path in (read + "loss", read + "nope", batch + "loss", batch + "nope")]
    assert {r.status_code for r in answers} == {404}
    assert {r.json()["detail"] for r in answers} == {f"job #{theirs.pk} not found"}
    owner = Client()
    owner.force_login(user)
    assert owner.get(read + "loss").json()["buckets"][0][2:4] == [1.0, 1.0]
    missing = owner.get(read + "nope")
    assert missing.status_code == 404 and missing.json()["detail"] == f"job #{theirs.pk} has no series 'nope'"
    missing = owner.get(batch + "loss&key=nope")
    assert missing.status_code == 404 and "'nope'" in missing.json()["detail"]
