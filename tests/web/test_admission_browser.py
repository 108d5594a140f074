"""An admission check from a config's page, in Chromium against the whole stack (daphne,
a real Celery worker measuring the toy student, the Redis channel layer): make a config
from a preset, open "Check admission" against the team's budget, submit, and watch the
job's charts and log receive live points while it runs, then its verdict.  Screenshots go
to ``test-artifacts/admission-flow/``."""
import json
import re
from pathlib import Path

from playwright.sync_api import expect

from opdweb.jobs.models import Job, JobState
from tests.web.approval_world import make_budget
from tests.web.browser import log_in

SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "admission-flow"


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def live_points_of(page, key: str) -> int:
    """The last step of ``key`` the page holds (-1 if none)."""
    return json.loads(page.get_attribute("#job", "data-points") or "{}").get(key, -1)


def test_an_admission_check_of_a_preset_config_streams_live_and_gives_a_verdict(
        member, start_worker, asgi_server, page, toy_student):
    user, team = member
    budget = make_budget(team, toy_student, value=50.0)
    start_worker()
    base = f"http://{asgi_server}"
    log_in(page, base, user)

    page.click("nav >> text=Configs")
    page.click("text=New config")
    page.click("a[data-preset=fp8-w-kv]")
    page.fill("form input[name=name]", "fp8 w+kv")
    page.click("#save-form")
    expect(page).to_have_url(re.compile(r"/configs/\d+/$"))
    config_page = page.url

    # "Check admission" against the budget fills the new-job form: this config, the budget's
    # checkpoint, task and unit engine.
    page.select_option("#check-admission select[name=budget]", str(budget.pk))
    page.click("#check-admission button[type=submit]")
    expect(page.locator("select[name=kind]")).to_have_value("admission")
    form = json.loads(page.input_value("textarea[name=config]"))
    assert form["budget"] == budget.pk and form["model"] == toy_student and form["task"] == budget.task
    assert form["rollout"]["weights"] == "fp8_e4m3" and form["rollout"]["kv_cache"] == "fp8_e4m3"
    # Many small batches, so the run lasts long enough to be watched.
    page.click("#advanced summary")
    page.fill("textarea[name=config]", json.dumps({**form, "prompts": 1024, "batch_size": 8, "drift": False}))
    shot(page, "1-new-admission-check")
    page.click("#submit-json")
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(kind="admission")

    # While it runs: the rollout's k3 chart grows from live points, and the log streams.
    page.wait_for_function(
        """() => { const root = document.getElementById('job');
                   const held = JSON.parse(root.dataset.points || '{}')['mismatch/rollout_k3'];
                   return root.dataset.state === 'running' && held !== undefined && held >= 3; }""", timeout=120_000)
    expect(page.locator("#live-status")).to_have_text("live")
    expect(page.locator("#charts .chart[data-keys*='mismatch/rollout_k3']")).to_have_count(1)
    first_seen = live_points_of(page, "mismatch/rollout_k3")
    expect(page.locator("#job-log")).to_contain_text(f"job {job.pk} (admission) attempt 1 started")
    shot(page, "2-running-live")
    page.wait_for_function(
        f"""() => (JSON.parse(document.getElementById('job').dataset.points || '{{}}')['mismatch/rollout_k3'] ?? -1)
                  > {first_seen} || document.getElementById('job').dataset.state !== 'running'""", timeout=60_000)

    # The end: the page shows the verdict the job stored, against this budget.
    expect(page.locator("#job-state")).to_have_text("succeeded", timeout=240_000)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.traceback
    verdict = job.result["verdict"]
    assert verdict in ("pass", "fail", "inconclusive")
    expect(page.locator("#admission-verdict .verdict")).to_have_text(verdict)
    expect(page.locator("#admission-verdict")).to_contain_text(f"budget #{budget.pk}")
    # Every batch of the rollout's k3 is stored and drawn.
    assert job.result["prompts"] == 1024
    expect(page.locator("#charts .chart[data-keys*='mismatch/rollout_k3']")).to_have_count(1)
    shot(page, "3-verdict")

    # The config's page lists the check with its verdict.
    page.goto(config_page)
    expect(page.locator("#config-jobs")).to_contain_text(f"#{job.pk}")
    expect(page.locator("#config-jobs")).to_contain_text(verdict)
