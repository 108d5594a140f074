"""Every page of the product in Chromium, as a team admin of a team with something of each
kind (a traced admission check, a sensitivity scan, configs, a budget with its curve, an
approval, a registered model): each answers 200 (the missing job a styled 404), runs
without a script error or a failed request, and is kept as a screenshot under
``test-artifacts/pages/``."""
from pathlib import Path

from opdweb.approvals.actions import do_request_approval
from opdweb.registry.models import RegisteredModel
from opdweb.rollouts.actions import do_create_config
from opdweb.teams.models import Role
from opdweb.tokens.actions import do_create_token
from opdweb.traces.sink import TraceSink
from tests.web.approval_world import admission_job, make_budget, make_checkpoint
from tests.web.browser import log_in
from tests.web.factories import JobFactory, MembershipFactory
from tests.web.test_budget_pages import CURVE
from tests.web.test_job_result_charts import SENSITIVITY

SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "pages"


def test_every_page_renders_without_errors(start_asgi_server, page, tmp_path, settings):
    models = tmp_path / "models"
    settings.OPDWEB_MODEL_ROOTS = [models]
    checkpoint = make_checkpoint(models)
    base = "http://" + start_asgi_server(OPDWEB_MODEL_ROOTS=str(models))
    admin = MembershipFactory(role=Role.ADMIN)
    team, user = admin.team, admin.user
    bf16, _ = do_create_config(team=team, user=user, name="bf16", data={})
    fp8, _ = do_create_config(team=team, user=user, name="fp8 w+kv",
                              data={"weights": "fp8_e4m3", "kv_cache": "fp8_e4m3"})
    budget = make_budget(team, checkpoint, curve=CURVE)
    check = admission_job(team, checkpoint, fp8.config, budget, multiple=3.2)
    sink = TraceSink(check.pk)
    for key, factor in (("mismatch/reference_k3", 1.0), ("mismatch/rollout_k3", 3.2)):
        sink.add_many(key, range(200), [factor * (1 + s % 5) * 1e-5 for s in range(200)],
                      [1.7e9 + s for s in range(200)])
    sink.close()
    scan = JobFactory(team=team, created_by=user, kind="sensitivity", state="succeeded",
                      config={"model": checkpoint, "rollout": fp8.config}, result=SENSITIVITY)
    approval = do_request_approval(record=fp8, user=user, checkpoint=checkpoint, comment="for the 7B run")
    external = JobFactory(team=team, created_by=user, kind="external", state="running", name="verl fp8 run",
                          config={"mlflow": {"experiment_id": "1", "experiment": "opd", "run_id": "ab" * 16},
                                  "params": {"lr": "1e-6"}, "tags": {"mlflow.runName": "verl fp8 run"}})
    sink = TraceSink(external.pk)
    sink.add_many("rollout_corr/k3_kl", range(50), [1e-4 * (1 + s / 10) for s in range(50)],
                  [1.7e9 + s for s in range(50)])
    sink.close()
    do_create_token(user=user, team=team, name="cluster-a", can_write=True)
    model = RegisteredModel.objects.create(team=team, name="toy student", path=checkpoint, kind="student",
                                           created_by=user)

    pages = {
        "home": "/", "jobs": "/jobs/", "new-job": "/jobs/new/", "admission-job": f"/jobs/{check.pk}/",
        "sensitivity-job": f"/jobs/{scan.pk}/", "compare-jobs": f"/jobs/compare/?ids={check.pk},{scan.pk}",
        "configs": "/configs/", "new-config": "/configs/new/", "config": f"/configs/{fp8.pk}/",
        "compare-configs": f"/configs/compare/?ids={bf16.pk},{fp8.pk}", "approvals": "/approvals/",
        "approval": f"/approvals/{approval.pk}/", "budgets": "/budgets/", "budget": f"/budgets/{budget.pk}/",
        "models": "/models/", "model": f"/models/{model.pk}/", "teams": "/teams/", "team": f"/teams/{team.slug}/",
        "audit": f"/teams/{team.slug}/audit/", "webhook": f"/teams/{team.slug}/webhook/", "status": "/status/",
        "external-job": f"/jobs/{external.pk}/", "tokens": "/tokens/",
    }
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"script error: {exc}"))
    page.on("console", lambda msg: errors.append(f"console: {msg.text}") if msg.type == "error" else None)
    page.on("requestfailed", lambda request: errors.append(f"request failed: {request.url}"))
    log_in(page, base, user)
    SHOTS.mkdir(parents=True, exist_ok=True)
    for name, path in pages.items():
        response = page.goto(base + path)
        page.wait_for_load_state("networkidle")
        assert response.status == 200, (name, response.status)
        assert page.locator("nav").count() == 1, name  # every page has the navigation
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
        assert errors == [], (name, errors)

    response = page.goto(f"{base}/jobs/{check.pk + 1000}/")
    assert response.status == 404 and page.locator("nav").count() == 1
    page.screenshot(path=str(SHOTS / "not-found.png"), full_page=True)
    assert [e for e in errors if "404" not in e] == []  # the browser reports the 404 itself on the console
