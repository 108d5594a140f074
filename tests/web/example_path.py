"""A newcomer's walk through the product's own examples, in a browser: the Budgets page's
example calibration, an admission check of the vLLM FP8 preset (vLLM's online FP8, W8A8,
with an FP8 KV cache) against the budget it stored, an approval asked for and given by a
second person (invited by the first), and the vLLM export downloaded.  Only links, buttons
and forms a person would use; the one thing typed is what a newcomer types (a config's
name, a comment, a password).

The browser test walks it at a smoke size (``size`` overrides the example's calibration
config); ``benchmarks/bench_example_path.py`` walks it as shipped, on a fresh ``make run``,
and times each stage."""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import expect

#: The example calibration made small: 3 seeds of 30 steps of 64 sequences learn the toy student
#: (38 % -> about 53 % held-out, a gain whose lower end clears 5 points), two levels and no
#: more rounds; a 40-point tolerance, so the smoke size reaches a budget however its seeds spread.
SMOKE = {"steps": 30, "batch_size": 64, "eval_prompts": 200, "levels": [100.0, 1000.0], "seeds": 3, "max_seeds": 3,
         "max_extensions": 0, "max_bisections": 0, "measure_prompts": 64, "tolerance": 40.0, "min_gain": 5.0}


@dataclass
class Walk:
    """Where the walk got to: each stage's seconds, and what it made."""

    seconds: dict[str, float] = field(default_factory=dict)
    calibration: str = ""  # the calibration job's page
    budget: str = ""  # the budget's page
    admission: str = ""
    verdict: str = ""
    export: str = ""  # the vLLM export's text

    def timed(self, stage: str, started: float) -> None:
        self.seconds[stage] = round(time.monotonic() - started, 1)


def log_in(page, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    expect(page.locator("button:has-text('Log out')")).to_be_visible()


def wait_for_job(page, ceiling_ms: int) -> str:
    """The job page's final state, waited for on the page itself (it updates live)."""
    expect(page.locator("#job-state")).to_have_text(re.compile("succeeded|failed|cancelled"), timeout=ceiling_ms)
    return page.locator("#job-state").inner_text()


def walk(page, base: str, username: str, password: str, *, ceiling_ms: int, size: dict | None = None,
         shots: Path | None = None) -> Walk:
    """The whole path from logging in to the export (the module docstring)."""
    done = Walk()

    def shot(name: str) -> None:
        if shots is not None:
            shots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shots / f"{name}.png"), full_page=True)

    started = time.monotonic()
    log_in(page, base, username, password)
    page.click("nav >> text=Budgets")
    page.click("#calibration-example")
    expect(page.locator("select[name=kind]")).to_have_value("calibration")
    shot("1-calibration-example")
    if size:
        page.click("#advanced summary")
        example = json.loads(page.input_value("textarea[name=config]"))
        page.fill("textarea[name=config]", json.dumps({**example, **size}))
        page.click("#submit-json")
    else:
        page.click("#submit-fields")
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    done.calibration = page.url
    state = wait_for_job(page, ceiling_ms)
    shot("2-calibration-done")
    assert state == "succeeded", page.locator("#job-log").inner_text()[-2000:]
    done.timed("calibration", started)
    page.click("#calibrated-budget a")
    expect(page).to_have_url(re.compile(r"/budgets/\d+/$"))
    done.budget = page.url
    budget_id = page.url.rstrip("/").rsplit("/", 1)[1]

    started = time.monotonic()
    page.click("nav >> text=Configs")
    page.click("text=New config")
    page.click("a[data-preset=vllm-fp8]")
    page.fill("form input[name=name]", "vllm fp8")
    page.click("#save-form")
    expect(page).to_have_url(re.compile(r"/configs/\d+/$"))
    config_page = page.url
    page.select_option("#check-admission select[name=budget]", budget_id)
    page.click("#check-admission button[type=submit]")
    expect(page.locator("select[name=kind]")).to_have_value("admission")
    page.click("#submit-fields")
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    done.admission = page.url
    assert wait_for_job(page, ceiling_ms) == "succeeded", page.locator("#job-log").inner_text()[-2000:]
    done.verdict = (page.locator("#admission-verdict .verdict").text_content() or "").strip()
    shot("3-admission-verdict")
    done.timed("admission", started)

    started = time.monotonic()
    page.goto(config_page)
    page.select_option("#pick-checkpoint", label="toy student (student)")  # the budget's checkpoint
    page.fill("#request-approval textarea[name=comment]", "the example's FP8 rollouts")
    page.click("#request-approval button[type=submit]")
    expect(page.locator("#approval-state")).to_have_text("pending")
    approval_page = page.url
    shot("4-approval-requested")

    # A second person: invited by the first as an approver, sets a password, approves.
    page.click("nav >> text=Teams")
    page.click("main table a >> nth=0")  # the first team: the demo team
    page.fill("#invite-member input[name=username]", "reviewer")
    page.select_option("#invite-member select[name=role]", label="approver")
    page.click("#invite-member button[type=submit]")
    link = page.input_value("#invite-link")
    page.click("button:has-text('Log out')")
    page.goto(link)
    reviewer_password = "a second person's passphrase"
    page.fill("#set-password input[name=new_password1]", reviewer_password)
    page.fill("#set-password input[name=new_password2]", reviewer_password)
    page.click("#set-password button[type=submit]")
    log_in(page, base, "reviewer", reviewer_password)
    page.click("nav >> text=Approvals")
    page.click(f"a[href='{approval_page.split(base, 1)[1]}']")
    expect(page.locator("#verdict")).to_have_text("pass")
    page.fill("#decide textarea[name=comment]", "within budget")
    page.click("#decide button[value=approve]")
    expect(page.locator("#approval-state")).to_have_text("approved")
    shot("5-approved")
    with page.expect_download() as download:
        page.click("#exports button[data-format=vllm]")
    done.export = Path(download.value.path()).read_text()
    done.timed("approval and export", started)
    return done
