"""Driving Debian's Chromium with Playwright: where it is, how it starts, logging in. The
``page`` fixture that opens it lives in ``conftest.py``."""
import re

from playwright.sync_api import expect

from tests.web.conftest import CEILING_S
from tests.web.factories import PASSWORD

CHROMIUM = "/usr/bin/chromium"
JOB_CEILING_MS = CEILING_S * 1000  # a real worker's job, in Playwright's milliseconds
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def log_in(page, base, user):
    page.goto(f"{base}/jobs/")
    expect(page).to_have_url(re.compile(r"/login/"))
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Jobs")
