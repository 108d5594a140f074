"""An admission check from a config's page, in Chromium against the whole stack (daphne,
a real Celery worker measuring the toy student, the Redis channel layer): make a config
from a preset, open "Check admission" against the team's budget, submit, and watch the
job's charts and log receive live points while it runs, then its verdict.  Screenshots go
to ``test-artifacts/admission-flow/``.

Every wait ends at its event (the worker starting the job, a point reaching the page) under a
ceiling generous enough for a machine at load 15; none is a guess at how long the job takes."""
import json
import re
from pathlib import Path

from playwright.sync_api import expect

from opdweb.jobs.models import Job, JobState
from tests.web.approval_world import make_budget
from tests.web.browser import JOB_CEILING_MS, log_in
from tests.web.conftest import wait_for

SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "admission-flow"


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


# FP8 E4M3 keeps 3 mantissa bits to BF16's 7, so its rounding error's variance is 2^8 = 256 times
# BF16's; k3 grows with that variance, so FP8 weights and FP8 KV together stay within about
# 2 x 256 ~ 500 times the BF16 unit (docs/budget/results.md measured this preset at 47.2x on the
# demo pair).  Against 5,000x the check's whole CI lies below the budget: a pass, by a wide margin.
BUDGET = 5000.0
RUNNING_WITH_POINTS = """() => { const root = document.getElementById('job');
    const held = JSON.parse(root.dataset.points || '{}')['mismatch/rollout_k3'] ?? -1;
    const state = root.dataset.state;
    return (held >= 3 || ['succeeded', 'failed', 'cancelled'].includes(state)) && {state, held}; }"""


def live_points_of(page, key: str) -> int:
    """The last step of ``key`` the page holds (-1 if none)."""
    return json.loads(page.get_attribute("#job", "data-points") or "{}").get(key, -1)


def test_an_admission_check_of_a_preset_config_streams_live_and_gives_a_verdict(
        member, start_worker, asgi_server, page, toy_student):
    user, team = member
    budget = make_budget(team, toy_student, value=BUDGET)
    worker = start_worker()
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
    wait_for(lambda: Job.objects.get(pk=job.pk).state != JobState.QUEUED, JOB_CEILING_MS / 1000,
             "the worker to start the admission check", interval=0.5, process=worker)

    # While it runs: the rollout's k3 chart grows from live points, and the log streams.
    seen = page.wait_for_function(RUNNING_WITH_POINTS, timeout=JOB_CEILING_MS).json_value()
    assert seen["state"] == "running", (seen, Job.objects.get(pk=job.pk).traceback)
    expect(page.locator("#live-status")).to_have_text("live")
    expect(page.locator("#charts .chart[data-keys*='mismatch/rollout_k3']")).to_have_count(1)
    first_seen = live_points_of(page, "mismatch/rollout_k3")
    expect(page.locator("#job-log")).to_contain_text(f"job {job.pk} (admission) attempt 1 started")
    shot(page, "2-running-live")
    # More points, and only points: the page is not reloaded, so each came over the live channel
    # (1,024 prompts in batches of 8 are 128 points; the check runs them all, see below).
    page.wait_for_function(
        f"""() => (JSON.parse(document.getElementById('job').dataset.points || '{{}}')['mismatch/rollout_k3'] ?? -1)
                  > {first_seen}""", timeout=JOB_CEILING_MS)

    # The end: the page shows the verdict the job stored, against this budget: a pass (see BUDGET).
    expect(page.locator("#job-state")).to_have_text(re.compile("succeeded|failed"), timeout=JOB_CEILING_MS)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.traceback
    verdict = job.result["verdict"]
    assert (verdict, job.result["multiple_ci"][1] < BUDGET) == ("pass", True), job.result["multiple_ci"]
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
