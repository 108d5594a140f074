"""The budget pages and the admission verdict on a job page, for members and outsiders, and
the budget curve drawn in a real browser."""
from __future__ import annotations

import re

from django.utils.html import escape
from playwright.sync_api import expect

from opdweb.budgets.models import MismatchBudget
from opdweb.jobs.models import Job, JobState
from opdweb.jobs.runner import record_outcome
from tests.web.browser import log_in
from tests.web.results import admission_result, calibration_result
from tests.web.test_budget_jobs import stored_calibration

CURVE = [
    {"target": 10.0, "multiple": 9.1, "multiple_ci": [7.0, 11.0], "setting": {"noise_sigma": 0.02},
     "accuracies": [0.50, 0.52], "accuracy_mean": 0.51, "accuracy_sd": 0.0141, "drop_points": 0.0,
     "allowance_points": 2.4, "within": True},
    {"target": 100.0, "multiple": 95.0, "multiple_ci": [80.0, 110.0], "setting": {"noise_sigma": 0.06},
     "accuracies": [0.40, 0.42], "accuracy_mean": 0.41, "accuracy_sd": 0.0141, "drop_points": 10.0,
     "allowance_points": 2.4, "within": False},
]


def a_budget_with_a_check(team, user, student="/models/student"):
    budget = stored_calibration(team, user, student, 9.1)
    type(budget).objects.filter(pk=budget.pk).update(curve=CURVE)  # the stored curve of this example
    budget.refresh_from_db()
    check = Job.objects.create(
        team=team, created_by=user, kind="admission", name="fp8 w+kv", state=JobState.SUCCEEDED,
        config={"model": student, "budget": budget.spec(), "prompts": 64},
        result=admission_result("inconclusive", 9.0, [6.0, 12.0], budget=budget.spec(), margin=1.01,
                                reason="the 95% CI [6, 12] contains the budget 9.1x", prompts_to_decide=5000))
    return budget, check


def test_members_see_budgets_and_verdicts_and_outsiders_get_404(member, outsider, client):
    user, team = member
    budget, check = a_budget_with_a_check(team, user)
    client.force_login(user)
    listing = client.get("/budgets/").content.decode()
    assert f'href="/budgets/{budget.pk}/"' in listing and "9.1" in listing
    assert '<span class="meta pair">of the hf BF16 engine / fp32 trainer</span>' in listing
    detail = client.get(f"/budgets/{budget.pk}/").content.decode()
    # a curve from before drop intervals: its levels were within or not, none is called "beyond"
    assert 'id="budget-curve"' in detail and ">not within<" in detail and ">within<" in detail
    assert ">beyond<" not in detail
    assert f'href="/jobs/{check.pk}/"' in detail and "inconclusive" in detail  # the check placed on its budget
    verdict = client.get(f"/jobs/{check.pk}/").content.decode()
    assert 'class="verdict inconclusive"' in verdict and f"/jobs/new/?clone={check.pk}&amp;prompts=5000" in verdict
    # Extending the measurement: the form comes back with the budget's id and the larger prompt count.
    form = client.get(f"/jobs/new/?clone={check.pk}&prompts=5000").content.decode()
    assert "&quot;budget&quot;: " + str(budget.pk) in form and "&quot;prompts&quot;: 5000" in form
    client.force_login(outsider)
    assert client.get(f"/budgets/{budget.pk}/").status_code == 404
    assert f"/budgets/{budget.pk}/" not in client.get("/budgets/").content.decode()
    assert client.get(f"/api/budgets/{budget.pk}").status_code == 404
    assert client.get(f"/jobs/new/?clone={check.pk}").status_code == 404


def test_the_budget_curve_is_drawn_with_the_check_on_it(member, asgi_server, page):
    user, team = member
    budget, _ = a_budget_with_a_check(team, user)
    base = f"http://{asgi_server}"
    log_in(page, base, user)
    page.goto(f"{base}/budgets/{budget.pk}/")
    expect(page.locator("#budget-curve .main-svg").first).to_be_visible()
    legend = page.locator("#budget-curve .legendtext")
    expect(legend).to_contain_text(["seeds", "mean", "admission: inconclusive"])
    expect(page.locator("#checks")).to_contain_text("fp8 w+kv")
    expect(page.locator("h1")).to_have_text(re.compile(r"Budget #\d+"))


def test_check_admission_fills_the_form_from_a_budget_and_refuses_another_teams(member, outsider, client):
    import json

    from opdweb.rollouts.models import RolloutConfigRecord

    user, team = member
    budget = stored_calibration(team, user, "/models/student", 9.1)
    record = RolloutConfigRecord.objects.create(team=team, created_by=user, name="fp8", config={"weights": "fp8_e4m3"},
                                                config_hash="f" * 64)
    client.force_login(user)
    page = client.get(f"/configs/{record.pk}/")
    assert f'<option value="{budget.pk}">budget #{budget.pk}: /models/student' in page.content.decode()
    form = client.get(f"/jobs/new/?kind=admission&rollout={record.pk}&budget={budget.pk}").context["form"]
    config = json.loads(form["config"])
    assert (form["kind"], form["name"]) == ("admission", f"fp8 vs budget #{budget.pk}")
    assert (config["model"], config["task"], config["reference_engine"], config["budget"], config["rollout"]) == (
        "/models/student", "arithmetic:1", "hf", budget.pk, {"weights": "fp8_e4m3"})

    jobs_before = Job.objects.count()
    client.force_login(outsider)
    assert client.get(f"/jobs/new/?kind=admission&budget={budget.pk}").status_code == 404
    assert client.get(f"/jobs/new/?kind=admission&rollout={record.pk}&budget={budget.pk}").status_code == 404
    assert Job.objects.count() == jobs_before


def test_measure_fills_a_multiple_job_from_a_config_without_any_budget(member, outsider, client, settings, tmp_path):
    """A first user, no budget calibrated: the config page's "Measure" opens the mismatch
    form with the config and the named checkpoint, and it submits as it is."""
    import json

    from opdweb.rollouts.models import RolloutConfigRecord
    from tests.web.approval_world import make_loadable_checkpoint

    settings.OPDWEB_MODEL_ROOTS = [tmp_path / "models"]
    checkpoint = make_loadable_checkpoint(tmp_path / "models", "student")
    user, team = member
    record = RolloutConfigRecord.objects.create(team=team, created_by=user, name="fp8", config={"weights": "fp8_e4m3"},
                                                config_hash="e" * 64)
    client.force_login(user)
    page = client.get(f"/configs/{record.pk}/").content.decode()
    assert 'id="measure"' in page and "no budget calibrated in this team yet" in page
    form = client.get(f"/jobs/new/?kind=mismatch&rollout={record.pk}&model={checkpoint}").context["form"]
    config = json.loads(form["config"])
    assert (form["kind"], form["name"], form["team"]) == ("mismatch", "fp8: multiple", team.slug)
    assert (config["model"], config["rollout"]) == (str(checkpoint), {"weights": "fp8_e4m3"})
    response = client.post("/jobs/new/", {**form, "team": team.slug})
    job = Job.objects.get(kind="mismatch", team=team)
    assert response.status_code == 302 and job.config["rollout"]["weights"] == "fp8_e4m3"
    without_model = json.loads(client.get(f"/jobs/new/?kind=mismatch&rollout={record.pk}").context["form"]["config"])
    assert without_model["model"].endswith("toy/test/student")  # the example's checkpoint
    client.force_login(outsider)
    assert client.get(f"/jobs/new/?kind=mismatch&rollout={record.pk}").status_code == 404


def test_an_uninformative_calibration_stores_no_budget_and_its_page_says_what_to_change(member, client):
    user, team = member
    before = MismatchBudget.objects.count()
    job = Job.objects.create(team=team, created_by=user, kind="calibration", config={}, state=JobState.RUNNING)
    message = ("uninformative: the BF16 baseline went 10.0% -> 10.0% over 30 steps (gain 0 points, lower end 0), not "
               "more than the 1.4 points required, so no drop could be told from no learning and no budget is "
               "stored. Train longer (steps), raise lr or batch_size, or calibrate a pair whose student learns.")
    learning = {"start_mean": 0.1, "final_mean": 0.1, "gain_points": 0.0, "gain_low": 0.0, "required_points": 1.4,
                "seeds": 3, "informative": False}
    result = calibration_result("/models/student", None, status="uninformative", bracket=[None, None],
                                learning=learning, message=message, seed_z=None, confidence=0.95)
    assert record_outcome(job, JobState.SUCCEEDED, {"result": result})
    assert MismatchBudget.objects.count() == before  # nothing stored: there is no budget
    page = client_page(client, user, f"/jobs/{job.pk}/")
    assert 'id="calibration-outcome"' in page and "uninformative" in page and "Train longer (steps)" in page
    assert 'id="calibrated-budget"' not in page


def test_an_undecided_calibration_stores_no_budget_and_its_page_says_why_in_words(member, client):
    # The lowest level's drop interval straddles the tolerance at the seed cap: no budget, the curve and the words.
    user, team = member
    before = MismatchBudget.objects.count()
    job = Job.objects.create(team=team, created_by=user, kind="calibration", config={}, state=JobState.RUNNING)
    message = ("undecided: the lowest level (10x) dropped accuracy by +0.10 points, but with 6 seeds its 95% interval "
               "[-1.20, +1.90] still straddles the 1.4-point tolerance: the seeds' final accuracies spread too much")
    curve = [dict(CURVE[0], drop_ci=[-1.2, 1.9], judgement="inconclusive", within=False),
             dict(CURVE[1], drop_ci=[-0.5, 20.5], judgement="inconclusive", within=False)]
    for row in curve:
        row.pop("allowance_points")
    result = calibration_result("/models/student", None, status="undecided", bracket=[None, 10.0], curve=curve,
                                message=message, seed_z=None, confidence=0.95)
    assert record_outcome(job, JobState.SUCCEEDED, {"result": result})
    assert MismatchBudget.objects.count() == before
    page = client_page(client, user, f"/jobs/{job.pk}/")
    outcome = page.split('id="calibration-outcome"', 1)[1].split("</section>", 1)[0]
    assert "undecided</span>: no budget was stored" in outcome and "still straddles the 1.4-point tolerance" in outcome
    assert "Shown safe nowhere" in outcome  # the curve is still read
    assert "ConfigError" not in page


def test_a_strict_rule_curve_shows_each_levels_drop_interval_and_judgement(member, client):
    user, team = member
    budget = stored_calibration(team, user, "/models/student", 9.1)
    strict = [dict(CURVE[0], drop_ci=[-1.5, 1.2], judgement="within"),
              dict(CURVE[1], drop_ci=[-0.5, 20.5], judgement="inconclusive", within=False)]
    for row in strict:
        row.pop("allowance_points")
    type(budget).objects.filter(pk=budget.pk).update(curve=strict)
    page = client_page(client, user, f"/budgets/{budget.pk}/")
    assert "[-1.50, 1.20] pts" in page and "[-0.50, 20.50] pts" in page
    assert '<td class="warn">inconclusive</td>' in page and '<td class="ok">within</td>' in page


def client_page(client, user, url: str) -> str:
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_the_same_budget_reads_the_same_on_every_page(member, client):
    # 85916.811 with every level within: "≥ 85,900× (not reached)" wherever it shows, never "85916.811×",
    # "8.59e+04x" or a bare number without its "≥".
    user, team = member
    budget = stored_calibration(team, user, "/models/student", 85916.811)
    type(budget).objects.filter(pk=budget.pk).update(status="not_reached")
    budget.refresh_from_db()
    check = Job.objects.create(
        team=team, created_by=user, kind="admission", name="fp8", state=JobState.SUCCEEDED,
        config={"model": "/models/student", "budget": budget.spec(), "prompts": 64},
        result=admission_result("pass", 9.0, [6.0, 12.0], budget=budget.spec(), margin=9546.3,
                                reason="the 95% CI [6, 12] lies below the budget"))
    for url in ("/budgets/", f"/budgets/{budget.pk}/", f"/jobs/{check.pk}/"):
        page = re.sub(r"<script.*?</script>|<pre.*?</pre>", "", client_page(client, user, url), flags=re.S)
        assert "≥ 85,900× (not reached)" in page, url
        assert "85916" not in page and "8.59e+04" not in page, url  # the page's text, the raw JSON aside


def test_the_budget_curve_has_axis_titles(member, asgi_server, page):
    user, team = member
    budget, _ = a_budget_with_a_check(team, user)
    log_in(page, f"http://{asgi_server}", user)
    page.goto(f"http://{asgi_server}/budgets/{budget.pk}/")
    page.wait_for_function("() => document.querySelector('#budget-curve')._fullLayout")
    titles = page.eval_on_selector("#budget-curve", "d => [d._fullLayout.xaxis.title.text, "
                                                    "d._fullLayout.yaxis.title.text]")
    assert titles == ["multiple of the BF16 engine's mismatch (measured)", "held-out accuracy after equal steps (%)"]


def test_the_budgets_page_says_how_to_calibrate_and_links_an_example_that_learns(member, client):
    user, _ = member
    page = client_page(client, user, "/budgets/")
    assert 'id="how-to-calibrate" open' in page and 'href="/jobs/new/?kind=calibration"' in page
    form = client_page(client, user, "/jobs/new/?kind=calibration")
    # the example the form offers: the steps and batch on which the toy student learns (tested by training it in
    # tests/science/test_budget_jobs.py::test_the_calibration_example_offered_on_the_form_learns)
    assert "&quot;steps&quot;: 100" in form and "&quot;batch_size&quot;: 256" in form


def test_extend_to_decide_submits_the_same_check_with_the_prompts_that_would_decide_it(member, client, toy_student):
    user, team = member
    budget = stored_calibration(team, user, toy_student, 9.1)
    check = Job.objects.create(
        team=team, created_by=user, kind="admission", name="fp8", state=JobState.SUCCEEDED,
        config={"model": toy_student, "budget": budget.spec(), "prompts": 64, "seed": 3},
        result=admission_result("inconclusive", 9.0, [6.0, 12.0], budget=budget.spec(), margin=1.01,
                                reason="the 95% CI [6, 12] contains the budget 9.1x", prompts_to_decide=5000))
    page = client_page(client, user, f"/jobs/{check.pk}/")
    assert 'id="extend-to-decide"' in page and 'name="prompts" value="5000"' in page
    response = client.post(f"/jobs/{check.pk}/extend/", {"prompts": "5000"})
    extended = Job.objects.exclude(pk=check.pk).get(kind="admission")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{extended.pk}/"
    assert extended.config["prompts"] == 5000 and extended.config["seed"] == 3  # the same first prompts, more
    assert extended.config["budget"]["id"] == budget.pk and extended.name == "fp8 (extended to 5,000 prompts)"
    before = Job.objects.count()
    assert client.post(f"/jobs/{check.pk}/extend/", {"prompts": "64"}).status_code == 400  # not more than before
    assert client.get(f"/jobs/{check.pk}/extend/").status_code == 405
    assert Job.objects.count() == before


TRANSFER = [
    {"name": "fp8", "kind": "quantization", "rollout": {"weights": "fp8_e4m3"}, "async_k": 0, "multiple": 30.0,
     "multiple_ci": [25.0, 36.0], "sigma": 0.03, "noise_multiple": 29.0, "accuracies": [0.55, 0.56],
     "redrawn": {"accuracies": [0.60, 0.61], "difference_points": 5.0, "difference_ci": [3.1, 6.9],
                 "agreement": "differs"},
     "persistent": {"accuracies": [0.55, 0.56], "difference_points": 0.0, "difference_ci": [-1.2, 1.2],
                    "agreement": "agrees"}},
    {"name": "bf16-sync", "kind": "staleness", "rollout": {}, "async_k": 1, "multiple": 0.9, "multiple_ci": None,
     "message": "0.9x is not above the BF16 unit: nothing to match with noise"},
]


def test_a_budget_names_its_source_and_shows_its_transfer_check_and_checks_carry_the_warning(member, client):
    user, team = member
    job = Job.objects.create(team=team, created_by=user, kind="calibration", config={}, state=JobState.RUNNING)
    result = calibration_result("/models/student", 10.0, source="persistent-noise", transfer=TRANSFER,
                                shown_to_transfer=["quantization"])
    assert record_outcome(job, JobState.SUCCEEDED, {"result": result})
    budget = MismatchBudget.objects.get(calibration_job=job)
    assert (budget.source, budget.shown_to_transfer) == ("persistent-noise", ["quantization"])
    assert budget.spec()["shown_to_transfer"] == ["quantization"] and budget.spec()["source"] == "persistent-noise"
    page = client_page(client, user, f"/budgets/{budget.pk}/")
    assert "weight noise drawn once per run" in page and "<b>quantization</b>" in page
    assert '<td class="bad">5.00 pts [3.10, 6.90]: differs</td>' in page
    assert '<td class="ok">0.00 pts [-1.20, 1.20]: agrees</td>' in page
    assert "nothing to match with noise" in page
    warning = "this config's staleness was never shown to transfer to the budget's scale"
    check = Job.objects.create(
        team=team, created_by=user, kind="admission", name="fp8 stale", state=JobState.SUCCEEDED,
        config={"model": "/models/student", "budget": budget.spec(), "prompts": 64},
        result=admission_result("pass", 3.0, [2.0, 4.0], budget=budget.spec(),
                                calibrated_with="weight noise drawn once per run", transfer_warnings=[warning]))
    page = client_page(client, user, f"/jobs/{check.pk}/")
    assert "The budget was calibrated with weight noise drawn once per run; shown to transfer to quantization." in page
    assert f'<p class="warning transfer-warning">{escape(warning)}</p>' in page
