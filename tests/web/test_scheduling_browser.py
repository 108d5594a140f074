"""The fleet answers interactive work first, as a person sees it in Chromium against daphne
and two real workers: a measurement clicked while a calibration trains finishes while the
calibration still runs."""
from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from opdweb.jobs.models import TERMINAL_STATES, Job, JobState
from tests.web.browser import log_in
from tests.web.conftest import CEILING_S, wait_for
from tests.web.test_budget_jobs import calibration_config, children_states
from workers.science.entrypoints import get_kind


def submit_json(page, base: str, kind: str, config: dict) -> int:
    """Submits a job from the form's JSON box, as a person pasting a config does; its id."""
    page.goto(f"{base}/jobs/new/")
    page.select_option("select[name=kind]", kind)
    page.click("#advanced summary")
    page.locator("textarea[name=config]").fill(json.dumps(config))
    page.click("#submit-json")
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    return int(page.url.rstrip("/").rsplit("/", 1)[1])


@pytest.mark.slow
def test_a_measurement_clicked_during_a_calibration_finishes_while_the_calibration_runs(
        member, start_worker, asgi_server, page, toy_student):
    user, team = member
    start_worker("cpu1", queues="cpu")
    start_worker("g1", queues="gpu")
    base = f"http://{asgi_server}"
    log_in(page, base, user)

    calibration = submit_json(page, base, "calibration", calibration_config(toy_student))
    wait_for(lambda: Job.objects.filter(parent_id=calibration, state=JobState.RUNNING).exists(), CEILING_S,
             "a child of the calibration to train")
    measure = submit_json(page, base, "mismatch", {**get_kind("mismatch").example(toy_student), "prompts": 8,
                                                   "max_new_tokens": 4, "device": "cpu"})
    # The measurement's page shows it end, live, while the calibration's children still have work.
    expect(page.locator("#job-state")).to_have_text("succeeded", timeout=CEILING_S * 1000)
    still = Job.objects.filter(parent_id=calibration).exclude(state__in=TERMINAL_STATES)
    assert still.exists(), children_states(Job.objects.get(pk=calibration))
    measured = Job.objects.get(pk=measure)
    assert measured.state == JobState.SUCCEEDED
    # It went ahead of children queued before it (first come, first served would have run them first).
    passed = Job.objects.filter(parent_id=calibration, created_at__lt=measured.created_at).exclude(
        started_at__lt=measured.started_at)
    assert passed.exists(), children_states(Job.objects.get(pk=calibration))
    page.goto(f"{base}/jobs/{calibration}/")
    assert page.locator("#job-state").inner_text() not in TERMINAL_STATES
    # Done with it: Cancel stops the calibration and its children.
    page.click("#cancel")
    expect(page.locator("#job-state")).to_have_text("cancelled", timeout=CEILING_S * 1000)
    wait_for(lambda: not Job.objects.filter(parent_id=calibration).exclude(state__in=TERMINAL_STATES).exists(),
             CEILING_S, "the calibration's children to end")
