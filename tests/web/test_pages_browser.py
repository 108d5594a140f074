"""The pages in a real browser (Debian's Chromium driven by Playwright): log in, submit a
job through the form, watch it stream live to the end, cancel another."""
import re

from playwright.sync_api import expect

from opdweb.jobs.models import Job, JobState
from opdweb.traces.models import TraceSeries
from tests.web.browser import JOB_CEILING_MS, log_in
from tests.web.conftest import wait_for


def test_a_member_submits_a_job_and_watches_it_live(member, start_worker, asgi_server, page, tmp_path):
    user, team = member
    worker = start_worker()
    base = f"http://{asgi_server}"
    log_in(page, base, user)

    page.click("text=New job")
    page.fill("input[name=name]", "browser smoke")
    page.click("#advanced summary")
    page.fill("textarea[name=config]", '{"steps": 150, "sleep_s": 0.02}')
    page.click("#submit-json")
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="browser smoke")

    expect(page.locator("#job-state")).to_have_text("succeeded", timeout=JOB_CEILING_MS)
    # Both series drawn, and the page holds the last step of each (live or from history).
    expect(page.locator(".chart")).to_have_count(2)
    expect(page.locator("#job")).to_have_attribute("data-points", re.compile(r'"selftest/linear":149'), timeout=10_000)
    assert set(TraceSeries.objects.filter(job=job).values_list("key", flat=True)) == {"selftest/linear",
                                                                                      "selftest/square"}
    # The result and the log arrive without a reload.
    expect(page.locator("#job-result")).to_contain_text('"steps": 150')
    expect(page.locator("#job-log")).to_contain_text("succeeded")
    page.screenshot(path=str(tmp_path / "job.png"), full_page=True)

    # Bad input on the form: a clear message, nothing created.
    page.goto(f"{base}/jobs/new/")
    page.click("#advanced summary")
    page.fill("textarea[name=config]", '{"steps": "many"}')
    page.click("#submit-json")
    expect(page.locator(".error")).to_contain_text("steps")
    assert Job.objects.count() == 1

    # Choosing another kind offers that kind's example config.
    page.goto(f"{base}/jobs/new/")
    page.select_option("select[name=kind]", "mismatch")
    assert '"model":' in page.input_value("textarea[name=config]")
    assert "toy/test/student" in page.input_value("textarea[name=config]")

    # The status page shows a member that a worker is alive, not its name or host (staff only).
    page.goto(f"{base}/status/")
    expect(page.locator("#workers-alive")).to_contain_text("1 alive on cpu")
    assert "w1@test" not in page.content()
    assert worker.alive()


def test_a_member_cancels_a_running_job_from_its_page(member, start_worker, asgi_server, page):
    user, team = member
    start_worker()
    base = f"http://{asgi_server}"
    log_in(page, base, user)
    page.goto(f"{base}/jobs/new/")
    page.click("#advanced summary")
    page.fill("textarea[name=config]", '{"steps": 100000, "sleep_s": 0.01}')
    page.click("#submit-json")
    expect(page.locator("#job-state")).to_have_text("running", timeout=JOB_CEILING_MS)
    page.click("#cancel")
    expect(page.locator("#job-state")).to_have_text("cancelled", timeout=30_000)
    job = Job.objects.get()
    wait_for(lambda: Job.objects.get(pk=job.pk).state == JobState.CANCELLED, 10, "cancelled in the database")


def test_the_policy_blocks_an_inline_script_and_the_page_fixture_sees_it(member, asgi_server, page):
    """The CSP check of every browser test can fail: a script injected inline is refused."""
    user, _ = member
    base = f"http://{asgi_server}"
    log_in(page, base, user)
    with page.expect_console_message(lambda message: "inline script violates" in message.text,
                                     timeout=JOB_CEILING_MS):  # the refusal's report, not a pause
        page.evaluate("""() => { const s = document.createElement("script");
            s.textContent = "window.injected = true"; document.body.appendChild(s); }""")
    assert page.evaluate("() => window.injected === undefined")
    assert any("inline script violates" in v and "The action has been blocked" in v for v in page.csp_violations)
    page.csp_violations.clear()
