"""Driving Debian's Chromium with Playwright: where it is, how it starts, logging in. The
``page`` fixture that opens it lives in ``conftest.py``."""
import re

from playwright.sync_api import expect

from tests.web.factories import PASSWORD

CHROMIUM = "/usr/bin/chromium"
# The ceiling of a wait for a real worker's job (ms): generous enough for a machine at load 15;
# each wait ends at its event, so a quiet machine never waits it out.
JOB_CEILING_MS = 600_000
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def log_in(page, base, user):
    page.goto(f"{base}/jobs/")
    expect(page).to_have_url(re.compile(r"/login/"))
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Jobs")
