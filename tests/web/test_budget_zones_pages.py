"""A budget's three zones and both criteria on its page and over the API, the team setting that
chooses which criterion an admission check is judged under, and a check that is not shown safe
on its job page."""
from __future__ import annotations

from opdweb.budgets.models import MismatchBudget
from opdweb.budgets.receivers import resolve_admission_budget
from opdweb.jobs.models import Job, JobState
from opdweb.jobs.runner import record_outcome
from opdweb.teams.models import AuditEntry, Role
from tests.web.factories import MembershipFactory
from tests.web.results import admission_result, calibration_result
from tests.web.test_budget_pages import client_page as page
from workers.science.budget.config import BudgetSpec


def rung(target, multiple, drop, drop_ci, judgement, accuracies=(0.50, 0.51, 0.52)):
    mean = sum(accuracies) / len(accuracies)
    return {"target": target, "multiple": multiple, "multiple_ci": [multiple * 0.9, multiple * 1.1],
            "setting": {"noise_sigma": 0.01}, "accuracies": list(accuracies), "accuracy_mean": mean,
            "accuracy_sd": 0.01, "drop_points": drop, "within": judgement == "within", "drop_ci": drop_ci,
            "judgement": judgement}


# 9.1x within; 30x inconclusive (mean drop 1.0, under the 1.4 tolerance, interval straddling it);
# 95x beyond (its whole interval above 1.4).  Strict budget 9.1x; the paper's (mean drop <= 1.4)
# reaches 30x and stops at 95x (10 points); shown harmful from 95x.
CURVE = [rung(10.0, 9.1, 0.0, [-0.8, 0.8], "within"), rung(30.0, 30.0, 1.0, [0.2, 1.8], "inconclusive"),
         rung(100.0, 95.0, 10.0, [8.0, 12.0], "beyond")]


def calibrated(team, user) -> MismatchBudget:
    """A calibration recorded as succeeded through the runner's path, with the curve above."""
    job = Job.objects.create(team=team, created_by=user, kind="calibration", config={"levels": [10, 100]},
                             state=JobState.RUNNING)
    result = calibration_result("/models/student", 9.1, curve=CURVE, bracket=[9.1, 30.0], confidence=0.95)
    assert record_outcome(job, JobState.SUCCEEDED, {"result": result})
    return MismatchBudget.objects.select_related("team").get(calibration_job=job)


def test_it_shows_the_three_zones_and_both_criteria_with_what_would_decide(member, client):
    user, team = member
    budget = calibrated(team, user)
    text = page(client, user, f"/budgets/{budget.pk}/")
    assert "shown safe</th><td>up to 9.1×" in text
    assert "shown harmful</th><td>from 95×, the first level" in text
    assert "between 9.1× and 95×: the levels there were not within, none was shown to hurt" in text
    # more seeds at the inconclusive 30x (3 seeds now: up to 6), or a level at sqrt(9.1 * 30) = 16.5x
    assert "more seeds (up to 6) at 30x (3 seeds now), or a level at about 16.5x, between 9.1x and 30x" in text
    link = f"/jobs/new/?clone={budget.calibration_job_id}&amp;levels=10.0,16.5,30.0&amp;max_seeds=6"
    assert link in text
    assert '<tr id="criterion-strict"><td>strict</td>' in text and "<td>9.1×</td><td><b>decides</b>" in text
    assert """<tr id="criterion-mean"><td>the paper's</td><td>its mean drop is at most 1.4 points</td><td>30×</td>""" \
        in text
    # one click: the calibration's form again, with those levels and seeds
    form = page(client, user, link.replace("&amp;", "&"))
    assert "&quot;levels&quot;: [\n    10.0,\n    16.5,\n    30.0\n  ]" in form and "&quot;max_seeds&quot;: 6" in form
    garbled = page(client, user, f"/jobs/new/?clone={budget.calibration_job_id}&levels=ten,x&max_seeds=-1")
    assert "&quot;levels&quot;: [\n    10,\n    100\n  ]" in garbled  # what does not parse is left as it was
    calibration = page(client, user, f"/jobs/{budget.calibration_job_id}/")
    assert "Shown safe up to 9.1×; shown harmful from 95×; not shown safe between (to decide: more seeds" in calibration
    assert "The paper's criterion (mean drop at most the tolerance) on the same curve: 30×." in calibration
    out = client.get(f"/api/budgets/{budget.pk}").json()
    assert (out["budget"], out["mean_budget"], out["harmful"], out["decides"]) == (9.1, 30.0, 95.0, "strict")


def test_an_old_curve_shows_nothing_harmful_and_no_beyond(member, client):
    user, team = member
    budget = calibrated(team, user)
    old = [{k: v for k, v in level.items() if k not in ("drop_ci", "judgement")} | {"allowance_points": 2.4}
           for level in CURVE]
    MismatchBudget.objects.filter(pk=budget.pk).update(curve=old)
    text = page(client, user, f"/budgets/{budget.pk}/")
    assert "shown harmful</th><td>not shown" in text and ">beyond<" not in text and ">not within<" in text
    assert BudgetSpec.model_validate(MismatchBudget.objects.get(pk=budget.pk).spec()).harmful is None


def test_the_team_setting_chooses_the_budget_an_admission_is_judged_against(member, client):
    user, team = member
    admin = MembershipFactory(team=team, role=Role.ADMIN).user
    budget = calibrated(team, user)
    config = {"model": "/models/student", "budget": budget.pk}
    strict = resolve_admission_budget(team, config)["budget"]
    assert (strict["budget"], strict["status"], strict["criterion"]) == (9.1, "reached", "strict")

    client.force_login(user)  # a member may not change it
    assert client.post(f"/teams/{team.slug}/budget-criterion/", {"budget_criterion": "mean"}).status_code == 403
    client.force_login(admin)
    bad = client.post(f"/teams/{team.slug}/budget-criterion/", {"budget_criterion": "lenient"})
    assert bad.status_code == 400 and "budget criterion must be one of strict, mean" in bad.content.decode()
    team.refresh_from_db()
    assert team.budget_criterion == "strict"
    assert client.post(f"/teams/{team.slug}/budget-criterion/", {"budget_criterion": "mean"}).status_code == 302
    team.refresh_from_db()
    assert team.budget_criterion == "mean"
    assert AuditEntry.objects.filter(team=team, action="team.budget_criterion").count() == 1

    mean = resolve_admission_budget(team, config)["budget"]
    assert (mean["budget"], mean["status"], mean["criterion"]) == (30.0, "reached", "mean")
    assert client.get(f"/api/budgets/{budget.pk}/spec").json() == mean  # the CLI's budget file: the same
    assert BudgetSpec.model_validate(mean).harmful == 95.0  # the harmful zone is the evidence, not a criterion
    text = page(client, admin, f"/budgets/{budget.pk}/")
    assert "<td>30×</td><td><b>decides</b>" in text


def test_an_admission_not_shown_safe_says_so_and_what_would_decide_it(member, client):
    user, team = member
    budget = calibrated(team, user)
    spec = budget.spec()
    words = "more seeds (up to 6) at 30x (3 seeds now), or a level at about 50x, between 30x and 95x"
    check = Job.objects.create(
        team=team, created_by=user, kind="admission", name="fp8", state=JobState.SUCCEEDED,
        config={"model": "/models/student", "budget": spec, "prompts": 64},
        result=admission_result("not_shown_safe", 40.0, [32.0, 50.0], budget=spec,
                                reason="the 95% CI [32, 50] lies above the budget 9.1x, but below 95x",
                                to_decide={"words": words, "command": "python -m workers calibrate ...",
                                           "levels": [10.0, 30.0, 50.0, 100.0], "max_seeds": 6}))
    text = page(client, user, f"/jobs/{check.pk}/")
    assert '<span class="verdict not_shown_safe">not shown safe</span>' in text
    assert "(above the budget, not shown harmful)" in text and words in text
    link = f"/jobs/new/?clone={budget.calibration_job_id}&amp;levels=10.0,30.0,50.0,100.0&amp;max_seeds=6"
    assert f'<a id="calibrate-to-decide" href="{link}">' in text
    assert 'id="request-approval"' not in text  # only a pass may be approved
    listing = page(client, user, f"/budgets/{budget.pk}/")
    assert 'class="verdict not_shown_safe" title="above the budget, not shown harmful">not shown safe<' in listing


def test_a_fail_judged_before_the_zones_still_renders_as_what_it_meant(member, client):
    user, team = member
    budget = calibrated(team, user)
    old_spec = {k: v for k, v in budget.spec().items() if k not in ("ladder", "criterion")}
    check = Job.objects.create(
        team=team, created_by=user, kind="admission", name="old", state=JobState.SUCCEEDED,
        config={"model": "/models/student", "budget": old_spec, "prompts": 64},
        result=admission_result("fail", 40.0, [32.0, 50.0], budget=old_spec,
                                reason="the 95% CI [32, 50] lies above the budget 9.1x"))
    text = page(client, user, f"/jobs/{check.pk}/")
    assert '<span class="verdict fail">fail</span>' in text
    assert "above the budget (judged before harm was told apart; not shown harmful)" in text
