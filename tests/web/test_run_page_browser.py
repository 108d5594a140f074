"""A linked run's page in Chromium against daphne: the multiple's chart draws the budget line
and marks the step the run first crossed it; an alert raised while the page is open appears
on it without a reload; the run's own watch rule is set from the page."""
import pytest
from playwright.sync_api import expect

from opdweb.runs.metric_map import MULTIPLE_KEY
from opdweb.runs.models import Alert, MlflowRun, WatchRule
from tests.web.browser import log_in
from tests.web.test_run_watch import BUDGET, CROSSING_STEP, Watched, verl_step

MULTIPLE_CHART = f'#charts .chart[data-keys="{MULTIPLE_KEY}"]'


@pytest.fixture
def breached_run(start_asgi_server, tmp_path, settings):
    """A verl run linked to its approval, above the planted budget from step 30 on."""
    world = Watched(tmp_path, settings)
    server = start_asgi_server(OPDWEB_MODEL_ROOTS=str(tmp_path / "models"))
    run_id = world.start()
    for step in range(1, 41):
        world.log(run_id, step, verl_step(step, 20.5 + step))
    return world, MlflowRun.objects.get(run_id=run_id).job, f"http://{server}"


def test_the_multiples_chart_draws_the_budget_line_and_marks_the_first_breach(breached_run, page):
    world, job, base = breached_run
    log_in(page, base, world.member)
    page.goto(f"{base}/jobs/{job.pk}/")
    chart = page.locator(MULTIPLE_CHART)
    expect(chart).to_have_count(1)
    page.wait_for_function(f"() => document.querySelector('{MULTIPLE_CHART}')?._fullLayout?.shapes?.length === 2")
    layout = chart.evaluate("d => ({shapes: d._fullLayout.shapes.map(s => ({xref: s.xref, yref: s.yref, x0: s.x0, "
                            "x1: s.x1, y0: s.y0, y1: s.y1, dash: s.line.dash})), "
                            "annotations: d._fullLayout.annotations.map(a => a.text), "
                            "x: d.data[0].x, y: d.data[0].y})")
    budget_line, = [s for s in layout["shapes"] if s["xref"] == "paper"]
    assert (budget_line["y0"], budget_line["y1"], budget_line["x0"], budget_line["x1"]) == (BUDGET, BUDGET, 0, 1)
    breach, = [s for s in layout["shapes"] if s["xref"] == "x"]
    assert (breach["x0"], breach["x1"], breach["yref"], breach["dash"]) == (CROSSING_STEP, CROSSING_STEP, "paper",
                                                                            "dot")
    assert any(text.startswith(f"budget {BUDGET:g}x BF16") for text in layout["annotations"])
    points = dict(zip(layout["x"], layout["y"], strict=True))  # the trainer's k3 over the unit's: 20.5 + step
    assert points[CROSSING_STEP - 1] == pytest.approx(BUDGET - 0.5)
    assert points[CROSSING_STEP] == pytest.approx(BUDGET + 0.5)
    alert_row = f'#run-alerts tr[data-alert-kind="budget"][data-alert-step="{CROSSING_STEP}"]'
    expect(page.locator(alert_row)).to_have_count(1)


def test_an_alert_raised_while_the_page_is_open_appears_on_it_and_can_be_acknowledged(start_asgi_server, tmp_path,
                                                                                      settings, page):
    world = Watched(tmp_path, settings)
    base = "http://" + start_asgi_server(OPDWEB_MODEL_ROOTS=str(tmp_path / "models"))
    run_id = world.start()
    for step in range(1, 11):  # within the budget so far
        world.log(run_id, step, verl_step(step, 20.0))
    job = MlflowRun.objects.get(run_id=run_id).job
    log_in(page, base, world.member)
    page.goto(f"{base}/jobs/{job.pk}/")
    expect(page.locator("#job")).to_have_attribute("data-replayed", "1")
    expect(page.locator("#run-no-alert")).to_be_visible()
    expect(page.locator("#run-alert-table")).to_be_hidden()

    for step in range(11, 16):  # above from step 11: the third step in a row alerts, naming step 11
        world.log(run_id, step, verl_step(step, 80.0))
    row = page.locator('#run-alert-table tr[data-alert-kind="budget"]')
    expect(row).to_have_count(1)
    expect(row).to_have_attribute("data-alert-step", "11")
    expect(row).to_contain_text("above the budget")
    expect(page.locator("#run-no-alert")).to_be_hidden()
    alert = Alert.objects.get(job=job)
    expect(row).to_have_attribute("data-alert-id", str(alert.pk))

    row.locator("button", has_text="Acknowledge").click()  # the live row's form posts as the page's does
    expect(page.locator(f'#run-alert-table tr[data-alert-id="{alert.pk}"]')).to_contain_text("acknowledged by")
    alert.refresh_from_db()
    assert alert.acknowledged_by == world.member


def test_a_member_sets_the_runs_own_rule_from_its_page_and_a_bad_value_keeps_the_input(breached_run, page):
    world, job, base = breached_run
    log_in(page, base, world.member)
    page.goto(f"{base}/jobs/{job.pk}/")
    form = page.locator("#run-watch-form")
    expect(page.locator("#run-watch-source")).to_contain_text("The defaults")
    form.locator("input[name=consecutive_steps]").fill("0")
    form.locator("input[name=ess_floor]").fill("0.4")
    form.locator("button[type=submit]").click()
    expect(page.locator("#refusal")).to_contain_text("consecutive_steps: must be from 1 to 100000")
    expect(form.locator("input[name=consecutive_steps]")).to_have_value("0")
    expect(form.locator("input[name=ess_floor]")).to_have_value("0.4")
    assert not WatchRule.objects.filter(job=job).exists()

    form.locator("input[name=consecutive_steps]").fill("2")
    form.locator("button[type=submit]").click()
    expect(page.locator("#run-watch-source")).to_contain_text("This run's own rule")
    rule = WatchRule.objects.get(job=job)
    assert (rule.consecutive_steps, rule.ess_floor) == (2, 0.4)
    page.locator("#run-watch-clear button").click()
    expect(page.locator("#run-watch-source")).to_contain_text("The defaults")
    assert not WatchRule.objects.filter(job=job).exists()
