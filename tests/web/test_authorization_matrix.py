"""Who may do what, as a matrix: two teams × four roles (viewer < member < approver <
admin), a user in no team and an anonymous visitor, against every API endpoint, every
page and the live channel, on both teams' jobs.

The expected answer of each cell comes from the rule, not from the code:
- in the job's team with a role at least the one the action needs → allowed;
- in the job's team with a lower role → 403 (a page's cancel: back to the job with an
  error, and nothing cancelled);
- another team's job, or no team at all → 404 (the job is not revealed); submitting to a
  team one does not belong to → 403;
- anonymous → 401 under ``/api/``, a redirect to the login page for pages, 4401 on the
  websocket (4404 for another team's job; accepted for the own team's, any role).
Lists (``/api/jobs``, ``/jobs/``, ``/status/``, ``/models/``, the submit form's teams) show
exactly the person's own teams.  Every wrong cell is collected; the test asserts there are none and
prints the matrix size.

The routes come from Django's URL resolver: every one has a row in ``ROWS`` (the matrix test
that requests it, which checks it did) or in ``NOT_IN_MATRIX`` (public, or Django's admin, or
tested for its own kind of caller in the module named), so a new route without a row fails
``test_every_route_has_a_row``.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import quote

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLResolver, get_resolver, resolve
from websockets.asyncio.client import connect

from opdweb.jobs.models import Job, JobLogEntry, JobState
from opdweb.runs.models import Alert, AlertKind
from opdweb.teams.models import Membership, Role, Team
from opdweb.traces.models import TraceSeries

ROLES = (Role.VIEWER, Role.MEMBER, Role.APPROVER, Role.ADMIN)
TEAMS = ("red", "blue")

HTTP = "test_http_authorization_matrix"
CONFIGS = "test_config_approval_and_team_pages_authorization_matrix"
REGISTRY = "test_model_registry_authorization_matrix"
RUNS = "test_run_pages_authorization_matrix"
#: Each route the resolver serves -> the matrix test whose cells request it.
ROWS = {
    "jobs/": HTTP, "jobs/new/": HTTP, "jobs/compare/": HTTP, "jobs/<int:job_id>/": HTTP,
    "jobs/<int:job_id>/cancel/": HTTP, "jobs/<int:job_id>/extend/": HTTP, "status/": HTTP,
    "runs/<int:job_id>/recheck/": RUNS, "runs/<int:job_id>/alerts/<int:alert_id>/acknowledge/": RUNS,
    "runs/<int:job_id>/artifacts/<path:path>": RUNS,
    "api/kinds": HTTP, "api/jobs": HTTP, "api/jobs/<int:job_id>": HTTP, "api/jobs/<int:job_id>/children": HTTP,
    "api/jobs/<int:job_id>/cancel": HTTP, "api/jobs/<int:job_id>/log": HTTP, "api/jobs/<int:job_id>/series": HTTP,
    "api/jobs/<int:job_id>/series/downsampled": HTTP, "api/jobs/<int:job_id>/export": HTTP,
    "configs/": CONFIGS, "configs/new/": CONFIGS, "configs/compare/": CONFIGS, "configs/<int:config_id>/": CONFIGS,
    "configs/<int:config_id>/edit/": CONFIGS, "configs/<int:config_id>/request-approval/": CONFIGS,
    "approvals/": CONFIGS, "approvals/<int:approval_id>/": CONFIGS, "approvals/<int:approval_id>/decide/": CONFIGS,
    "approvals/<int:approval_id>/export/<slug:fmt>/": CONFIGS, "approvals/<int:approval_id>/kv-scales/": CONFIGS,
    "budgets/": CONFIGS, "budgets/<int:budget_id>/": CONFIGS, "api/budgets": CONFIGS,
    "api/budgets/<int:budget_id>": CONFIGS,
    "api/budgets/<int:budget_id>/spec": CONFIGS,
    "teams/": CONFIGS, "teams/<slug:slug>/": CONFIGS, "teams/<slug:slug>/audit/": CONFIGS,
    "teams/<slug:slug>/members/": CONFIGS, "teams/<slug:slug>/webhook/": CONFIGS,
    "models/": REGISTRY, "models/<int:model_id>/": REGISTRY, "models/<int:model_id>/delete/": REGISTRY,
    "models/<int:model_id>/read/": REGISTRY,
}
#: Routes outside the matrix, each with why and where its callers' rights are tested.
NOT_IN_MATRIX = {
    "": "the signed-in person's home, across their own teams only; a login first (test_home_page.py)",
    "login/": "public: the login form (test_login_throttle.py)",
    "jobs/chart-layout/": "the signed-in person's own chart layout, no team's data; a login first "
                          "(test_chart_layout.py)",
    "logout/": "public: ends whatever session there is",
    "set-password/<uidb64>/<token>/": "public: an invited user's one-time link (test_team_pages.py)",
    "healthz": "public: the liveness probe (test_exposure.py)",
    "api/openapi.json": "public: the API's description (test_exposure.py, test_openapi_fuzz.py)",
    "configs/<int:config_id>/for/<str:target>/": "a member's derived-config form (test_approvals.py)",
    "teams/<slug:slug>/invitations/": "admins only (test_team_pages.py)",
    "teams/<slug:slug>/members/<int:membership_id>/role/": "admins only (test_team_pages.py)",
    "teams/<slug:slug>/members/<int:membership_id>/remove/": "admins only (test_team_pages.py)",
    "tokens/": "the user's own tokens only (test_api_tokens.py)",
    "tokens/<int:token_id>/revoke/": "the user's own tokens only (test_api_tokens.py)",
    "mlflow/<path:path>": "trainers with a run token, not sessions (test_api_tokens.py, test_mlflow_endpoints.py)",
    "api/runs/<str:run_id>/points": "trainers with a run token, not sessions (test_run_points.py)",
    "api/jobs/<int:job_id>/series/batch": "a POST of reads, by the job's viewers (test_trace_reads.py)",
    "api/jobs/estimate": "a member's estimate for a job of their own team, from that team's history only "
                         "(test_job_estimates.py)",
    "mlflow/": "public: a page of script that reads the run link's fragment (test_mlflow_reading.py)",
    "mlflow/runs/<str:run_id>": "the run's team only, else 404, a login first (test_mlflow_reading.py)",
    "mlflow/experiments/<str:experiment_id>": "a redirect to the signed-in user's job list (test_mlflow_reading.py)",
    "wandb/graphql": "trainers with a run token as the W&B key, not sessions; mutations read-write only "
                     "(test_wandb_client.py, test_wandb_bad_input.py)",
    "wandb/files/<str:entity>/<str:project>/<str:run>/file_stream": "a read-write token of the run's team "
                                                                      "(test_wandb_client.py, test_wandb_bad_input.py)",
    "wandb/upload/<str:signed>": "a URL signed for one run, file and token; the token still live and read-write "
                                 "(test_wandb_bad_input.py)",
    "wandb/<str:entity>/<str:project>/runs/<str:name>": "the run's team only, else 404, a login first "
                                                        "(test_wandb_bad_input.py)",
    "wandb/<str:entity>/<str:project>": "a redirect to the signed-in user's job list, a login first",
    "wandb/<path:rest>": "public: a JSON 404, nothing served (test_wandb_bad_input.py)",
    "teams/<slug:slug>/budget-criterion/": "admins only (test_budget_zones_pages.py)",
    "runs/<int:job_id>/watch/": "members of the run's team (test_run_watch.py)",
    "runs/<int:job_id>/watch/clear/": "members of the run's team (test_run_watch.py)",
    "runs/watch/<slug:slug>/": "admins only (test_run_watch.py)",
}
ADMIN_PREFIX = "admin/"  # Django's own admin site: staff only, tested by Django


def every_route(patterns=None, prefix: str = "") -> list[str]:
    """Every route the URL resolver serves, as its pattern (``jobs/<int:job_id>/``)."""
    routes = []
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(entry, URLResolver):
            routes += every_route(entry.url_patterns, prefix + str(entry.pattern))
        else:
            routes.append(prefix + str(entry.pattern))
    return routes


def test_every_route_has_a_row():
    served = {route for route in every_route() if not route.startswith(ADMIN_PREFIX)}
    assert set(ROWS).isdisjoint(NOT_IN_MATRIX)
    assert sorted(served - set(ROWS) - set(NOT_IN_MATRIX)) == [], "routes without a row in the matrix"
    assert sorted((set(ROWS) | set(NOT_IN_MATRIX)) - served) == [], "rows for routes the resolver no longer serves"
    assert set(ROWS.values()) == {HTTP, CONFIGS, REGISTRY, RUNS}


def rows_of(test_name: str) -> set[str]:
    return {route for route, test in ROWS.items() if test == test_name}


@dataclass
class Actor:
    label: str
    user: object | None  # None: anonymous
    roles: dict  # team slug -> Role

    def role_in(self, slug):
        return self.roles.get(slug)


def make_world():
    teams = {slug: Team.objects.create(name=f"Team {slug}", slug=slug) for slug in TEAMS}
    User = get_user_model()
    actors = []
    for slug in TEAMS:
        for role in ROLES:
            user = User.objects.create_user(f"{slug}-{role.label}")
            Membership.objects.create(team=teams[slug], user=user, role=role)
            actors.append(Actor(f"{slug} {role.label}", user, {slug: role}))
    actors.append(Actor("teamless", User.objects.create_user("teamless"), {}))
    actors.append(Actor("anonymous", None, {}))
    jobs = {}
    for slug, team in teams.items():
        job = Job.objects.create(team=team, kind="selftest", name=f"job of {slug}", config={"steps": 3},
                                 state=JobState.RUNNING)
        JobLogEntry.objects.create(job=job, created_at=datetime.now(timezone.utc), level="INFO", message="hello")
        TraceSeries.objects.create(job=job, key="selftest/linear", first_step=0, last_step=0)
        jobs[slug] = job
    return teams, actors, jobs


class RecordingClient(Client):
    """Django's test client, noting the route of every request it makes in ``routes``; a
    view's exception is its 500 answer, a wrong cell like any other."""

    def __init__(self, routes: set[str]):
        super().__init__(raise_request_exception=False)
        self.routes = routes

    def request(self, **request):
        self.routes.add(resolve(request["PATH_INFO"]).route)
        return super().request(**request)


def client_for(actor: Actor, routes: set[str]) -> Client:
    client = RecordingClient(routes)
    if actor.user is not None:
        client.force_login(actor.user)  # never client.login: django-axes needs a request there
    return client


class Matrix:
    def __init__(self):
        self.cells = 0
        self.wrong: list[str] = []

    def check(self, actor: Actor, what: str, expected, got) -> None:
        self.cells += 1
        if expected != got:
            self.wrong.append(f"{actor.label:16} {what:45} expected {expected!r}, got {got!r}")

    def report(self, part: str) -> None:
        print(f"\nauthorization matrix ({part}): {self.cells} cells, {len(self.wrong)} wrong")
        for line in self.wrong:
            print("  WRONG", line)


def api_expected(actor: Actor, slug: str, needs: Role, allowed: int) -> int:
    """The rule for an object under /api/."""
    if actor.user is None:
        return 401
    role = actor.role_in(slug)
    if role is None:
        return 404
    return allowed if role >= needs else 403


def submit_expected(actor: Actor, slug: str, allowed: int) -> int:
    if actor.user is None:
        return 401
    role = actor.role_in(slug)
    return allowed if role is not None and role >= Role.MEMBER else 403


def login_redirect(path: str):
    return 302, f"/login/?next={quote(path, safe='/')}"


def read_stream(response) -> bytes:
    async def collect():
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(collect)()


def page(response):
    """A page's answer: the status, and where a redirect goes."""
    if response.status_code in (301, 302):
        return response.status_code, response["Location"]
    return response.status_code


@pytest.mark.django_db
def test_http_authorization_matrix(capsys):
    teams, actors, jobs = make_world()
    matrix = Matrix()

    def teams_of_jobs(ids) -> set[str]:
        return set(Job.objects.filter(pk__in=list(ids)).values_list("team__slug", flat=True))

    # A second job per team, so each team has a pair to compare (queued: /status/ counts running ones).
    second = {slug: Job.objects.create(team=team, kind="selftest", config={"steps": 3}) for slug, team in teams.items()}
    routes: set[str] = set()

    for actor in actors:
        client = client_for(actor, routes)
        mine = set(actor.roles)
        anonymous = actor.user is None

        # Comparing a job of each team: no one is in both, so everyone gets 404.
        path = f"/jobs/compare/?ids={jobs['red'].pk},{jobs['blue'].pk}"
        matrix.check(actor, "GET /jobs/compare/ (both teams)", login_redirect(path) if anonymous else 404,
                     page(client.get(path)))

        # Endpoints without an object.
        r = client.get("/api/kinds")
        matrix.check(actor, "GET /api/kinds", 401 if anonymous else 200, r.status_code)
        r = client.get("/api/jobs")
        listed = None if r.status_code != 200 else teams_of_jobs(j["id"] for j in r.json())
        matrix.check(actor, "GET /api/jobs (teams listed)", (401, None) if anonymous else (200, mine),
                     (r.status_code, listed))
        for path in ("/jobs/", "/jobs/new/", "/status/"):
            r = client.get(path)
            if anonymous:
                matrix.check(actor, f"GET {path}", login_redirect(path), page(r))
                continue
            if path == "/jobs/":
                got = (r.status_code, teams_of_jobs(j.pk for j in r.context["jobs"]))
                want = (200, mine)
            elif path == "/jobs/new/":
                got = (r.status_code, {t.slug for t in r.context["teams"]})
                want = (200, {s for s, role in actor.roles.items() if role >= Role.MEMBER})
            else:
                got = (r.status_code, r.context["running"])  # the two jobs of the matrix run, one per team
                want = (200, len(mine))
            matrix.check(actor, f"GET {path} (own teams only)", want, got)

        for slug, job in jobs.items():
            base = f"/api/jobs/{job.pk}"
            reads = {
                "GET /api/jobs/{id}": base,
                "GET /api/jobs/{id}/children": f"{base}/children",
                "GET /api/jobs/{id}/log": f"{base}/log",
                "GET /api/jobs/{id}/series": f"{base}/series",
                "GET /api/jobs/{id}/series/downsampled": f"{base}/series/downsampled?key=selftest/linear",
                "GET /api/jobs/{id}/export": f"{base}/export?format=csv",
            }
            for what, path in reads.items():
                r = client.get(path)
                if r.streaming:
                    read_stream(r)
                matrix.check(actor, f"{what} ({slug})", api_expected(actor, slug, Role.VIEWER, 200), r.status_code)

            # Submitting to this team: the API and the form.
            before = Job.objects.count()
            r = client.post("/api/jobs", data=json.dumps({"kind": "selftest", "config": {"steps": 3}, "team": slug}),
                            content_type="application/json")
            expected = submit_expected(actor, slug, 201)
            matrix.check(actor, f"POST /api/jobs team={slug} (status, written)", (expected, expected == 201),
                         (r.status_code, Job.objects.count() == before + 1))
            before = Job.objects.count()
            r = client.post("/jobs/new/", {"kind": "selftest", "config": '{"steps": 3}', "name": "", "team": slug})
            if anonymous:
                want = login_redirect("/jobs/new/")
            elif submit_expected(actor, slug, 302) == 302:
                want = (302, f"/jobs/{Job.objects.order_by('-pk').first().pk}/")
            else:
                want = 403
            matrix.check(actor, f"POST /jobs/new/ team={slug}", (want, want != 403 and not anonymous),
                         (page(r), Job.objects.count() == before + 1))

            # The job's page.
            r = client.get(f"/jobs/{job.pk}/")
            if anonymous:
                want = login_redirect(f"/jobs/{job.pk}/")
            else:
                want = 404 if actor.role_in(slug) is None else 200
            matrix.check(actor, f"GET /jobs/{{id}}/ ({slug})", want, page(r))

            # Comparing two jobs of this team.
            path = f"/jobs/compare/?ids={job.pk},{second[slug].pk}"
            matrix.check(actor, f"GET /jobs/compare/ ({slug})", page_expected(actor, slug, Role.VIEWER, 200, path),
                         page(client.get(path)))

            # Cancelling, each attempt on a fresh queued job of this team.
            target = Job.objects.create(team=teams[slug], kind="selftest", config={"steps": 3})
            r = client.post(f"/api/jobs/{target.pk}/cancel")
            expected = api_expected(actor, slug, Role.MEMBER, 200)
            target.refresh_from_db()
            matrix.check(actor, f"POST /api/jobs/{{id}}/cancel ({slug}) (status, cancelled)",
                         (expected, expected == 200), (r.status_code, target.state == JobState.CANCELLED))
            target = Job.objects.create(team=teams[slug], kind="selftest", config={"steps": 3})
            r = client.post(f"/jobs/{target.pk}/cancel/")
            role = actor.role_in(slug)
            if anonymous:
                want = (login_redirect(f"/jobs/{target.pk}/cancel/"), False)
            elif role is None:
                want = (404, False)
            else:  # back to the job's page, with a message; cancelled only from member up
                want = ((302, f"/jobs/{target.pk}/"), role >= Role.MEMBER)
            target.refresh_from_db()
            matrix.check(actor, f"POST /jobs/{{id}}/cancel/ ({slug}) (answer, cancelled)", want,
                         (page(r), target.state == JobState.CANCELLED))

            # "Extend to decide", with a prompt count that is no number: past the role, the refusal (400);
            # nothing is submitted either way.
            before = Job.objects.count()
            path = f"/jobs/{job.pk}/extend/"
            matrix.check(actor, f"POST /jobs/{{id}}/extend/ ({slug}) (answer, written)",
                         (page_expected(actor, slug, Role.MEMBER, 400, path), False),
                         (page(client.post(path, {"prompts": "many"})), Job.objects.count() != before))

    with capsys.disabled():
        matrix.report("HTTP: API and pages")
    assert matrix.wrong == []
    assert matrix.cells == len(actors) * 32
    assert routes == rows_of(HTTP)


@pytest.mark.django_db
def test_run_pages_authorization_matrix(capsys):
    """The run page's buttons, on a job of each team (a job that is no run: past the role, the
    re-check goes back to the job with the reason)."""
    _, actors, jobs = make_world()
    matrix = Matrix()
    routes: set[str] = set()

    for actor in actors:
        client = client_for(actor, routes)
        for slug, job in jobs.items():
            # A re-check of a job that is no run: past the role, back to the job with the reason.
            before = Job.objects.count()
            path = f"/runs/{job.pk}/recheck/"
            matrix.check(actor, f"POST /runs/{{id}}/recheck/ ({slug}) (answer, written)",
                         (page_expected(actor, slug, Role.MEMBER, (302, f"/jobs/{job.pk}/"), path), False),
                         (page(client.post(path)), Job.objects.count() != before))

            # Acknowledging an alert on this team's job (a fresh one each time).
            alert = Alert.objects.create(job=job, kind=AlertKind.SILENCE, message="gone silent")
            path = f"/runs/{job.pk}/alerts/{alert.pk}/acknowledge/"
            r = client.post(path)
            alert.refresh_from_db()
            ok = (302, f"/jobs/{job.pk}/")
            want = page_expected(actor, slug, Role.MEMBER, ok, path)
            matrix.check(actor, f"POST /runs/{{id}}/alerts/{{id}}/acknowledge/ ({slug}) (answer, acknowledged)",
                         (want, want == ok), (page(r), alert.acknowledged_at is not None))

            # A file of a job that is no MLflow run: past the role, a 404 that says so (a run's
            # files and their permissions: tests/web/test_mlflow_artifacts.py).
            path = f"/runs/{job.pk}/artifacts/configs/x.yaml"
            matrix.check(actor, f"GET /runs/{{id}}/artifacts/... ({slug})",
                         page_expected(actor, slug, Role.VIEWER, 404, path), page(client.get(path)))

    with capsys.disabled():
        matrix.report("run pages")
    assert matrix.cells == len(actors) * len(jobs) * 3
    assert routes == rows_of(RUNS)
    assert matrix.wrong == []  # a viewer's re-check and acknowledge once answered 500, not 403


@pytest.mark.django_db(transaction=True)
def test_websocket_authorization_matrix(start_asgi_server, capsys):
    from django.contrib.sessions.backends.db import SessionStore

    teams, actors, jobs = make_world()
    host = start_asgi_server()
    matrix = Matrix()

    def cookie(user) -> str | None:
        if user is None:
            return None
        session = SessionStore()
        session["_auth_user_id"] = str(user.pk)
        session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
        session["_auth_user_hash"] = user.get_session_auth_hash()
        session.create()
        return f"{settings.SESSION_COOKIE_NAME}={session.session_key}"

    async def attempt(job_id: int, cookie_header: str | None):
        headers = {"Origin": "http://127.0.0.1", **({"Cookie": cookie_header} if cookie_header else {})}
        async with connect(f"ws://{host}/ws/jobs/{job_id}/", additional_headers=headers) as ws:
            msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=20))
            if msg["type"] == "state":
                return "accepted"
            await asyncio.wait_for(ws.wait_closed(), timeout=20)
            return msg.get("code"), ws.close_code

    async def run_all(cases):
        return await asyncio.gather(*(attempt(job_id, c) for job_id, c in cases))

    cases, expectations = [], []
    for actor in actors:
        header = cookie(actor.user)
        for slug, job in jobs.items():
            if actor.user is None:
                want = (4401, 4401)
            elif actor.role_in(slug) is None:
                want = (4404, 4404)
            else:
                want = "accepted"
            cases.append((job.pk, header))
            expectations.append((actor, f"ws/jobs/{{id}}/ ({slug})", want))
    for (actor, what, want), got in zip(expectations, asyncio.run(run_all(cases)), strict=True):
        matrix.check(actor, what, want, got)

    with capsys.disabled():
        matrix.report("websocket")
    assert matrix.wrong == []
    assert matrix.cells == len(actors) * len(jobs)


def page_expected(actor: Actor, slug: str, needs: Role, allowed, path: str):
    """The rule for a page on an object of team ``slug``."""
    if actor.user is None:
        return login_redirect(path)
    role = actor.role_in(slug)
    if role is None:
        return 404
    return allowed if role >= needs else 403


@pytest.mark.django_db
def test_config_approval_and_team_pages_authorization_matrix(capsys, tmp_path, settings):
    from opdweb.approvals.models import ApprovalRequest, ApprovalState, TeamWebhook
    from opdweb.rollouts.actions import do_create_config
    from opdweb.rollouts.models import RolloutConfigRecord
    from tests.web.approval_world import admission_job, make_budget, make_checkpoint
    from tests.web.test_approvals import CALIBRATED

    settings.OPDWEB_MODEL_ROOTS = [tmp_path / "models"]
    checkpoint = make_checkpoint(tmp_path / "models")
    teams, actors, _ = make_world()
    User = get_user_model()
    requester = {slug: User.objects.create_user(f"{slug}-requester") for slug in TEAMS}
    records, seconds, approved, with_kv_scales, budgets = {}, {}, {}, {}, {}
    for slug, team in teams.items():
        Membership.objects.create(team=team, user=requester[slug], role=Role.MEMBER)
        records[slug], _ = do_create_config(team=team, user=requester[slug], name=f"fp8 {slug}",
                                            data={"weights": "fp8_e4m3"})
        seconds[slug], _ = do_create_config(team=team, user=requester[slug], name=f"fp8 w+kv {slug}",
                                            data={"weights": "fp8_e4m3", "kv_cache": "fp8_e4m3"})
        budgets[slug] = budget = make_budget(team, checkpoint)

        def approve(record, rollout, team=team, budget=budget, by=requester[slug], **result):
            job = admission_job(team, checkpoint, rollout, budget, **result)
            return ApprovalRequest.objects.create(
                team=team, config=record, checkpoint=checkpoint, requested_by=by, state=ApprovalState.APPROVED,
                decided_by=by, decided_at=job.created_at, admission_job=job, budget=budget,
                checkpoint_hash=job.result["checkpoint_hash"])

        approved[slug] = approve(records[slug], {"weights": "fp8_e4m3"})
        kv = {"kv_cache": "fp8_e4m3", "targets": ["vllm"]}  # calibrated KV scales: the export ships their file
        kv_record, _ = do_create_config(team=team, user=requester[slug], name=f"fp8 kv {slug}", data=kv)
        with_kv_scales[slug] = approve(kv_record, kv, engine=CALIBRATED)
    matrix = Matrix()
    routes: set[str] = set()

    for actor in actors:
        client = client_for(actor, routes)
        anonymous = actor.user is None
        mine = set(actor.roles)
        for path, listed in (("/configs/", "records"), ("/approvals/", "approvals"), ("/teams/", "memberships"),
                             ("/budgets/", "budgets")):
            r = client.get(path)
            if anonymous:
                matrix.check(actor, f"GET {path}", login_redirect(path), page(r))
            else:
                matrix.check(actor, f"GET {path} (own teams only)", (200, mine),
                             (r.status_code, {o.team.slug for o in r.context[listed]}))

        r = client.get("/api/budgets")
        matrix.check(actor, "GET /api/budgets (teams listed)", (401, None) if anonymous else (200, mine),
                     (r.status_code, {b["team"] for b in r.json()} if r.status_code == 200 else None))

        path = f"/configs/compare/?ids={records['red'].pk},{records['blue'].pk}"
        matrix.check(actor, "GET /configs/compare/ (both teams)", login_redirect(path) if anonymous else 404,
                     page(client.get(path)))

        for slug, team in teams.items():
            record, approval = records[slug], approved[slug]
            reads = {
                "GET /configs/{id}/": (f"/configs/{record.pk}/", Role.VIEWER),
                "GET /configs/{id}/edit/": (f"/configs/{record.pk}/edit/", Role.MEMBER),
                "GET /configs/compare/": (f"/configs/compare/?ids={record.pk},{seconds[slug].pk}", Role.VIEWER),
                "GET /approvals/{id}/": (f"/approvals/{approval.pk}/", Role.VIEWER),
                "GET /teams/{slug}/": (f"/teams/{slug}/", Role.VIEWER),
                "GET /teams/{slug}/audit/": (f"/teams/{slug}/audit/", Role.VIEWER),
                "GET /teams/{slug}/webhook/": (f"/teams/{slug}/webhook/", Role.ADMIN),
                "GET /budgets/{id}/": (f"/budgets/{budgets[slug].pk}/", Role.VIEWER),
            }
            for what, (path, needs) in reads.items():
                matrix.check(actor, f"{what} ({slug})", page_expected(actor, slug, needs, 200, path),
                             page(client.get(path)))
            for what, path in (("GET /api/budgets/{id}", f"/api/budgets/{budgets[slug].pk}"),
                               ("GET /api/budgets/{id}/spec", f"/api/budgets/{budgets[slug].pk}/spec")):
                matrix.check(actor, f"{what} ({slug})", api_expected(actor, slug, Role.VIEWER, 200),
                             client.get(path).status_code)
            path = f"/approvals/{approval.pk}/export/yaml/"  # a download is a POST: it is audited
            matrix.check(actor, f"POST /approvals/{{id}}/export/yaml/ ({slug})",
                         page_expected(actor, slug, Role.VIEWER, 200, path), page(client.post(path)))
            path = f"/approvals/{with_kv_scales[slug].pk}/kv-scales/"  # the file the vLLM export names
            r = client.post(path)
            got = (page(r), r.get("Content-Disposition", "").endswith('"opdweb-kv-scales.safetensors"'))
            want = page_expected(actor, slug, Role.VIEWER, 200, path)
            matrix.check(actor, f"POST /approvals/{{id}}/kv-scales/ ({slug}) (answer, the file)", (want, want == 200),
                         got)

            # Creating a config in this team (a new one each time: a distinct seed).
            before = RolloutConfigRecord.objects.count()
            r = client.post("/configs/new/", {"source": "yaml", "team": slug, "yaml": f"seed: {before + 100}\n"})
            written = RolloutConfigRecord.objects.count() == before + 1
            role = actor.role_in(slug)
            if anonymous:
                want = login_redirect("/configs/new/")
            elif role is None or role < Role.MEMBER:
                want = 403  # as for jobs: creating in a team one cannot create in
            else:
                want = (302, f"/configs/{RolloutConfigRecord.objects.order_by('-pk').first().pk}/")
            matrix.check(actor, f"POST /configs/new/ team={slug} (answer, written)",
                         (want, isinstance(want, tuple) and want[1].startswith("/configs/")), (page(r), written))

            # Requesting approval of this team's config (a fresh config each time).
            fresh, _ = do_create_config(team=team, user=requester[slug], name="fresh",
                                        data={"seed": RolloutConfigRecord.objects.count() + 1000})
            path = f"/configs/{fresh.pk}/request-approval/"
            r = client.post(path, {"checkpoint": checkpoint})
            made = ApprovalRequest.objects.filter(config=fresh).first()
            ok = (302, f"/approvals/{made.pk}/") if made else (302, "/approvals/<new>/")
            want = page_expected(actor, slug, Role.MEMBER, ok, path)
            matrix.check(actor, f"POST /configs/{{id}}/request-approval/ ({slug}) (answer, written)",
                         (want, want == ok), (page(r), made is not None))

            # Deciding (reject: needs no evidence) a fresh request of someone else.
            pending = ApprovalRequest.objects.create(team=team, config=records[slug], requested_by=requester[slug],
                                                     checkpoint=f"{checkpoint}-{ApprovalRequest.objects.count()}")
            path = f"/approvals/{pending.pk}/decide/"
            r = client.post(path, {"decision": "reject"})
            pending.refresh_from_db()
            ok = (302, f"/approvals/{pending.pk}/")
            want = page_expected(actor, slug, Role.APPROVER, ok, path)
            matrix.check(actor, f"POST /approvals/{{id}}/decide/ ({slug}) (answer, rejected)",
                         (want, want == ok), (page(r), pending.state == ApprovalState.REJECTED))

            # Team administration: adding a member, setting the webhook.
            newcomer = User.objects.create_user(f"new-{actor.label.replace(' ', '-')}-{slug}")
            path = f"/teams/{slug}/members/"
            r = client.post(path, {"username": newcomer.username, "role": Role.VIEWER})
            ok = (302, f"/teams/{slug}/")
            want = page_expected(actor, slug, Role.ADMIN, ok, path)
            matrix.check(actor, f"POST /teams/{{slug}}/members/ ({slug}) (answer, added)",
                         (want, want == ok), (page(r), Membership.objects.filter(team=team, user=newcomer).exists()))
            path = f"/teams/{slug}/webhook/"
            TeamWebhook.objects.filter(team=team).delete()
            r = client.post(path, {"url": "https://93.184.216.34/hook", "secret": "x" * 20})  # a public address
            ok = (302, path)
            want = page_expected(actor, slug, Role.ADMIN, ok, path)
            matrix.check(actor, f"POST /teams/{{slug}}/webhook/ ({slug}) (answer, saved)",
                         (want, want == ok), (page(r), TeamWebhook.objects.filter(team=team).exists()))

    with capsys.disabled():
        matrix.report("configs, approvals, teams")
    assert matrix.wrong == []
    assert matrix.cells == len(actors) * (6 + len(TEAMS) * 17)
    assert routes == rows_of(CONFIGS)


@pytest.mark.django_db
def test_model_registry_authorization_matrix(capsys, tmp_path, settings):
    from opdweb.registry.models import RegisteredModel
    from tests.web.approval_world import make_loadable_checkpoint

    settings.OPDWEB_MODEL_ROOTS = [tmp_path / "models"]
    teams, actors, _ = make_world()
    shown = {slug: RegisteredModel.objects.create(team=team, name="shown", kind="student",
                                                  path=str(make_loadable_checkpoint(tmp_path / "models", slug)))
             for slug, team in teams.items()}
    matrix = Matrix()
    routes: set[str] = set()

    for actor in actors:
        client = client_for(actor, routes)
        anonymous = actor.user is None
        r = client.get("/models/")
        if anonymous:
            matrix.check(actor, "GET /models/", login_redirect("/models/"), page(r))
        else:
            matrix.check(actor, "GET /models/ (own teams only)", (200, set(actor.roles)),
                         (r.status_code, {m.team.slug for m in r.context["models"]}))

        for slug, team in teams.items():
            path = f"/models/{shown[slug].pk}/"
            matrix.check(actor, f"GET /models/{{id}}/ ({slug})", page_expected(actor, slug, Role.VIEWER, 200, path),
                         page(client.get(path)))

            # Registering in this team (a fresh checkpoint each time).
            checkpoint = make_loadable_checkpoint(tmp_path / "models", f"{slug}-{RegisteredModel.objects.count()}")
            r = client.post("/models/", {"team": slug, "name": checkpoint.name, "path": str(checkpoint),
                                         "kind": "checkpoint"})
            made = RegisteredModel.objects.filter(team=team, path=str(checkpoint)).first()
            if anonymous:
                want = login_redirect("/models/")
            elif submit_expected(actor, slug, 302) == 302:
                want = (302, f"/models/{made.pk}/" if made else "/models/<new>/")
            else:
                want = 403  # as for jobs: registering in a team one cannot register in
            matrix.check(actor, f"POST /models/ team={slug} (answer, written)",
                         (want, isinstance(want, tuple) and want[0] == 302 and not anonymous),
                         (page(r), made is not None))

            # Deleting an unused model of this team (a fresh one each time).
            n = RegisteredModel.objects.count()
            unused = RegisteredModel.objects.create(team=team, name=f"unused {n}", kind="checkpoint",
                                                    path=f"/unused/{n}")
            path = f"/models/{unused.pk}/delete/"
            r = client.post(path)
            want = page_expected(actor, slug, Role.ADMIN, (302, "/models/"), path)
            matrix.check(actor, f"POST /models/{{id}}/delete/ ({slug}) (answer, deleted)",
                         (want, want == (302, "/models/")),
                         (page(r), not RegisteredModel.objects.filter(pk=unused.pk).exists()))

            # Having it read again by a worker (a describe job queued).
            path = f"/models/{shown[slug].pk}/read/"
            before = Job.objects.filter(kind="describe").count()
            r = client.post(path)
            want = page_expected(actor, slug, Role.MEMBER, (302, f"/models/{shown[slug].pk}/"), path)
            matrix.check(actor, f"POST /models/{{id}}/read/ ({slug}) (answer, queued)",
                         (want, want == (302, f"/models/{shown[slug].pk}/")),
                         (page(r), Job.objects.filter(kind="describe").count() > before))

    with capsys.disabled():
        matrix.report("model registry")
    assert matrix.wrong == []
    assert matrix.cells == len(actors) * (1 + len(TEAMS) * 4)
    assert routes == rows_of(REGISTRY)
