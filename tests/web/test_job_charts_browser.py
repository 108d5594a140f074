"""The job page's chart controls, result charts, the job list's compare action and the
compare page, in Chromium against daphne."""
import re

from playwright.sync_api import expect

from opdweb.jobs.models import Job, JobState
from opdweb.traces.sink import TraceSink
from tests.web.browser import log_in
from tests.web.test_job_result_charts import DRIFT, SENSITIVITY


def finished_job_with_traces(team, user, name="fp8", steps=500, scale=1.0):
    job = Job.objects.create(team=team, created_by=user, kind="mismatch", name=name, state=JobState.SUCCEEDED,
                             config={"model": "/m/s", "rollout": {"weights": name}}, result={"multiple": scale})
    sink = TraceSink(job.pk)
    for key, factor in (("mismatch/reference_k3", 1.0), ("mismatch/rollout_k3", 3.0)):
        values = [scale * factor * (1 + s % 7) for s in range(steps)]
        sink.add_many(key, range(steps), values, [1.7e9 + s for s in range(steps)])
    sink.add_many("admission/multiple", [64], [3.25], [1.7e9])
    sink.close()
    return job


def chart_state(page, selector="#charts .chart"):
    return page.eval_on_selector(selector, "d => ({traces: d.data.length, ytype: d._fullLayout.yaxis.type, "
                                           "names: d.data.map(t => t.name), points: d.data[2].x.length})")


def test_chart_controls_overlay_smooth_log_and_zoom(member, asgi_server, page):
    user, team = member
    job = finished_job_with_traces(team, user)
    base = f"http://{asgi_server}"
    log_in(page, base, user)
    page.goto(f"{base}/jobs/{job.pk}/")
    # Rollout and reference on one chart; the single-point key as a number.
    expect(page.locator("#charts .chart")).to_have_count(1)
    expect(page.locator("#charts .chart")).to_have_attribute("data-keys", "mismatch/reference_k3,mismatch/rollout_k3")
    expect(page.locator("#single-values")).to_contain_text("admission/multiple")
    expect(page.locator("#single-values")).to_contain_text("3.25 (step 64)")
    state = chart_state(page)
    assert state["traces"] == 6 and state["ytype"] == "linear" and state["points"] == 500
    assert [n for n in state["names"] if n] == ["mismatch/reference_k3", "mismatch/rollout_k3"]
    expect(page.locator("#live-status")).to_have_text("")  # the job has ended: not live

    page.check("#log-y")
    page.wait_for_function("() => document.querySelector('#charts .chart')._fullLayout.yaxis.type === 'log'")
    page.uncheck("#log-y")
    page.wait_for_function("() => document.querySelector('#charts .chart')._fullLayout.yaxis.type === 'linear'")

    page.select_option("#smoothing", "ema:0.9")
    page.wait_for_function("() => document.querySelector('#charts .chart').data.length === 8")
    state = chart_state(page)
    assert "mismatch/rollout_k3 (ema:0.9)" in state["names"]
    assert page.eval_on_selector("#charts .chart", "d => d.data[2].opacity") == 0.3  # raw shown faint
    # Reference k3 at steps 0, 1, ... is 1, 2, ..., 7, 1, 2, 3: EMA 0.9 gives 1, 0.9 * 1 + 0.1 * 2 = 1.1, ...
    assert page.eval_on_selector("#charts .chart", "d => d.data[3].y.slice(0, 2)") == [1, 1.1]
    page.select_option("#smoothing", "mean:10")  # ... and the mean of the first ten is 34 / 10
    page.wait_for_function("() => document.querySelector('#charts .chart').data[3].name.endsWith('(mean:10)')")
    assert page.eval_on_selector("#charts .chart", "d => d.data[3].y[9]") == 3.4
    page.select_option("#smoothing", "none")
    page.wait_for_function("() => document.querySelector('#charts .chart').data.length === 6")

    # Zoom: the visible window is read again (steps 100..120 at full resolution).
    page.eval_on_selector("#charts .chart", "d => Plotly.relayout(d, {'xaxis.range': [100, 120]})")
    expect(page.locator("#charts .chart")).to_have_attribute("data-window", "100-120")
    page.wait_for_function("() => document.querySelector('#charts .chart').data[2].x.length === 21")
    assert page.eval_on_selector("#charts .chart", "d => d.data[2].x[0]") == 100
    page.eval_on_selector("#charts .chart", "d => Plotly.relayout(d, {'xaxis.autorange': true})")
    page.wait_for_function("() => document.querySelector('#charts .chart').data[2].x.length === 500")

    # x axis: time since the first point (the points were logged one second apart) ...
    page.select_option("#x-axis", "relative")
    page.wait_for_function("() => document.querySelector('#charts .chart')._fullLayout.xaxis.title.text"
                           ".startsWith('time since')")
    assert page.eval_on_selector("#charts .chart", "d => [d.data[2].x[0], d.data[2].x[499]]") == [0, 499]
    page.eval_on_selector("#charts .chart", "d => Plotly.relayout(d, {'xaxis.range': [100, 120]})")
    expect(page.locator("#charts .chart")).to_have_attribute("data-window", "100-120")
    # ... and wall time, zoomed by the local-time strings a drag gives: steps 200..230.
    page.select_option("#x-axis", "time")
    page.wait_for_function("() => document.querySelector('#charts .chart')._fullLayout.xaxis.type === 'date'")
    page.wait_for_function("() => document.querySelector('#charts .chart').data[2].x.length === 500")
    page.eval_on_selector("#charts .chart", """d => {
        const p = n => String(n).padStart(2, "0");
        const local = s => { const t = new Date((1.7e9 + s) * 1000);
          return `${t.getFullYear()}-${p(t.getMonth() + 1)}-${p(t.getDate())} ${p(t.getHours())}:${p(t.getMinutes())}:${p(t.getSeconds())}`; };
        return Plotly.relayout(d, {'xaxis.range': [local(200), local(230)]}); }""")  # noqa: E501
    expect(page.locator("#charts .chart")).to_have_attribute("data-window", "200-230")
    page.wait_for_function("() => document.querySelector('#charts .chart').data[2].x.length === 31")
    page.select_option("#x-axis", "step")
    page.wait_for_function("() => document.querySelector('#charts .chart').data[2].x[499] === 499")

    page.click("#glossary summary")
    expect(page.locator("#glossary")).to_contain_text("Effective sample size")


def test_the_page_reads_its_charts_in_batches_started_from_its_head(member, asgi_server, page):
    """20 keys: two batched reads (16 + 4 keys), asked before plotly has run, and no read per
    key; the charts follow key order whatever order the answers come in; a series that
    went NaN is drawn with its gap, and the page raises no error."""
    user, team = member
    job = Job.objects.create(team=team, created_by=user, kind="train", state=JobState.SUCCEEDED, config={})
    sink = TraceSink(job.pk)
    keys = [f"train/metric_{i:02d}" for i in range(20)]
    for i, key in enumerate(keys):
        values = [float(i + s % 5) for s in range(300)]
        if i == 7:
            values[100:110] = [float("nan")] * 10
        sink.add_many(key, range(300), values, [1.7e9 + s for s in range(300)])
    sink.close()
    base = f"http://{asgi_server}"
    log_in(page, base, user)
    asked, errors = [], []
    page.on("request", lambda r: asked.append(r.url) if "/api/" in r.url else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{base}/jobs/{job.pk}/")
    expect(page.locator("#charts .chart")).to_have_count(20)
    batches = [url for url in asked if "/series/batch?" in url]
    assert len(batches) == 2 and not [url for url in asked if "/series/downsampled" in url], asked
    assert [len(re.findall(r"[?&]key=", url)) for url in batches] == [16, 4]
    order = page.eval_on_selector_all("#charts .chart", "ds => ds.map(d => d.dataset.keys)")
    assert order == keys
    # Both batches were asked before the deferred scripts (plotly) had run.
    asked_at = page.evaluate("""() => performance.getEntriesByType("resource")
        .filter(e => e.name.includes("/series/batch")).map(e => e.startTime)""")
    scripts_done = page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventStart")
    assert len(asked_at) == 2 and max(asked_at) < scripts_done
    gap = page.eval_on_selector("#charts .chart[data-keys='train/metric_07']", "d => d.data[2].y.slice(99, 111)")
    assert gap[0] == 7 + 99 % 5 and gap[-1] == 7 + 110 % 5 and all(v != v for v in gap[1:-1]), gap  # NaN: a gap
    assert errors == []


def test_sensitivity_and_drift_results_are_drawn(member, asgi_server, page):
    user, team = member
    scan = Job.objects.create(team=team, created_by=user, kind="sensitivity", state=JobState.SUCCEEDED,
                              config={"unit": "module"}, result=SENSITIVITY)
    drift = Job.objects.create(team=team, created_by=user, kind="drift", state=JobState.SUCCEEDED, config={},
                               result=DRIFT)
    base = f"http://{asgi_server}"
    log_in(page, base, user)
    page.goto(f"{base}/jobs/{scan.pk}/")
    expect(page.locator("#sensitivity-ranking .main-svg").first).to_be_visible()
    expect(page.locator("#sensitivity-heatmap .main-svg").first).to_be_visible()
    assert page.eval_on_selector("#sensitivity-heatmap", "d => d.data[0].z") == [[1.5, 4.0], [2.0, None]]
    expect(page.locator("#recipe")).to_contain_text("model.layers.1.mlp.down_proj")
    page.goto(f"{base}/jobs/{drift.pk}/")
    expect(page.locator("#drift-histogram .main-svg").first).to_be_visible()
    assert page.eval_on_selector("#drift-histogram", "d => d.data[0].y") == [2, 1]
    assert page.eval_on_selector("#drift-prefix", "d => d.data[0].y") == [1.0, 1.0, 1.0, 0.5]


def test_compare_from_the_list(member, asgi_server, page):
    user, team = member
    a = finished_job_with_traces(team, user, "bf16", steps=50, scale=1.0)
    b = finished_job_with_traces(team, user, "fp8_e4m3", steps=50, scale=2.0)
    base = f"http://{asgi_server}"
    log_in(page, base, user)
    page.check(f"input[name=ids][value='{a.pk}']")
    page.check(f"input[name=ids][value='{b.pk}']")
    page.click("#compare")
    expect(page).to_have_url(re.compile(rf"/jobs/compare/\?ids={b.pk}&ids={a.pk}$"))  # the list is newest first
    expect(page.locator("h1")).to_have_text("Compare 2 jobs")
    expect(page.locator("#compare-parameters tr.differs")).to_have_count(1)
    expect(page.locator("#compare-parameters tr.differs")).to_have_attribute("data-key", "rollout.weights")
    # Each shared key overlaid: one line per job.
    expect(page.locator(".compare-chart")).to_have_count(3)
    chart = ".compare-chart[data-key='mismatch/rollout_k3']"
    page.wait_for_function(f"() => (d => d.data && d.data.length === 2)(document.querySelector(\"{chart}\"))")
    assert page.eval_on_selector(chart, "d => d.data.map(t => t.name)") == [f"#{b.pk} fp8_e4m3", f"#{a.pk} bf16"]
    assert page.eval_on_selector(chart, "d => d.data[0].y[0] / d.data[1].y[0]") == 2.0
    # The shareable URL with only the differences.
    page.click("#only-differences")
    expect(page).to_have_url(re.compile(rf"ids={b.pk},{a.pk}&diff=1$"))
    expect(page.locator("#compare-parameters tr")).to_have_count(1)


def test_the_list_follows_running_jobs_and_the_page_says_live(member, asgi_server, page):
    user, team = member
    running = Job.objects.create(team=team, created_by=user, kind="selftest", name="long", state=JobState.RUNNING,
                                 progress=0.2, config={"steps": 3})
    base = f"http://{asgi_server}"
    log_in(page, base, user)
    row = page.locator(f"tr[data-job-id='{running.pk}']")
    assert row.locator("progress").evaluate("p => p.value") == 0.2
    Job.objects.filter(pk=running.pk).update(progress=0.7)
    page.wait_for_function(f"() => document.querySelector(\"tr[data-job-id='{running.pk}'] progress\").value === 0.7",
                           timeout=10_000)
    Job.objects.filter(pk=running.pk).update(state=JobState.SUCCEEDED, progress=1.0)
    expect(row.locator(".state")).to_have_text("succeeded", timeout=10_000)
    expect(row.locator("a.clone")).to_have_attribute("href", f"/jobs/new/?clone={running.pk}")

    other = Job.objects.create(team=team, created_by=user, kind="selftest", state=JobState.RUNNING, config={})
    page.goto(f"{base}/jobs/{other.pk}/")
    expect(page.locator("#live-status")).to_have_text("live")


def test_a_live_chart_follows_new_points_until_zoomed_and_again_after_a_reset(member, asgi_server, page):
    """The issue's repro: points keep arriving over the live channel and the visible x range
    must keep up, without any control being touched; a zoom stops it, a reset resumes it."""
    from opdweb.jobs import live

    user, team = member
    job = Job.objects.create(team=team, created_by=user, kind="selftest", name="long", state=JobState.RUNNING,
                             progress=0.1, config={"steps": 1200, "sleep_s": 0.05})
    sink = TraceSink(job.pk, publish=lambda messages: live.publish(job.pk, messages))
    key = "selftest/loss"

    def add(first, last):
        steps = list(range(first, last))
        sink.add_many(key, steps, [1.0 / (1 + s) for s in steps], [1.7e9 + s for s in steps])
        sink.flush()

    def x_range():
        return page.eval_on_selector("#charts .chart", "d => d._fullLayout.xaxis.range")

    try:
        add(0, 20)
        base = f"http://{asgi_server}"
        log_in(page, base, user)
        page.goto(f"{base}/jobs/{job.pk}/")
        expect(page.locator("#live-status")).to_have_text("live")
        page.wait_for_function("() => document.querySelector('#charts .chart') && "
                               "document.querySelector('#charts .chart').data[2].x.length === 20")
        for first in range(20, 420, 40):  # steps 20 .. 419
            add(first, first + 40)
        page.wait_for_function("() => (() => { const x = document.querySelector('#charts .chart').data[2].x; "
                               "return x[x.length - 1] === 419; })()", timeout=15_000)
        page.wait_for_function("() => document.querySelector('#charts .chart')._fullLayout.xaxis.range[1] >= 419",
                               timeout=5_000)
        assert x_range()[0] <= 0

        page.eval_on_selector("#charts .chart", "d => Plotly.relayout(d, {'xaxis.range': [5, 10]})")
        expect(page.locator("#charts .chart")).to_have_attribute("data-window", "5-10")
        add(420, 480)
        # The points arrive (the event, not a pause); the zoomed chart stays where the user put it.
        page.wait_for_function("() => JSON.parse(document.getElementById('job').dataset.points || '{}')"
                               f"['{key}'] === 479", timeout=120_000)
        assert x_range() == [5, 10]

        page.eval_on_selector("#charts .chart", "d => Plotly.relayout(d, {'xaxis.autorange': true})")
        page.wait_for_function("() => document.querySelector('#charts .chart')._fullLayout.xaxis.range[1] >= 479",
                               timeout=10_000)
        add(480, 520)
        page.wait_for_function("() => document.querySelector('#charts .chart')._fullLayout.xaxis.range[1] >= 519",
                               timeout=10_000)
    finally:
        sink.close()


def test_step_axes_tick_whole_steps_and_a_calibrations_axis_says_ladder_level(member, asgi_server, page):
    user, team = member
    job = Job.objects.create(team=team, created_by=user, kind="calibration", name="ladder", state=JobState.SUCCEEDED,
                             config={}, result=None)
    sink = TraceSink(job.pk)
    sink.add_many("calibration/accuracy", [0, 1, 2], [0.76, 0.75, 0.70], [1.7e9, 1.7e9 + 1, 1.7e9 + 2])
    sink.close()
    log_in(page, f"http://{asgi_server}", user)
    page.goto(f"http://{asgi_server}/jobs/{job.pk}/")
    page.wait_for_function("() => document.querySelector('#charts .chart') && "
                           "document.querySelector('#charts .chart')._fullLayout")
    axis = page.eval_on_selector("#charts .chart", "d => ({title: d._fullLayout.xaxis.title.text, "
                                                   "ticks: d._fullLayout.xaxis._vals.map(v => v.x)})")
    assert axis["title"] == "ladder level (0: the BF16 baseline)"
    assert axis["ticks"] and all(float(t).is_integer() for t in axis["ticks"]), axis  # no tick at step 0.5
