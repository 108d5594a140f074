"""The three zones of a calibrated ladder (shown safe, not shown safe, shown harmful), the two
criteria (strict and the paper's mean drop) and the admission verdicts they give, on hand
curves whose drop intervals are worked out in the comments."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from workers.science.budget.arithmetic import Level, find_budget
from workers.science.budget.config import BudgetSpec, LadderRung
from workers.science.budget.results import CalibrationResult
from workers.science.budget.zones import budget_under, first_harmful, to_decide, zone_of
from workers.science.formatting import format_calibration
from workers.science.verdicts import decide

ROOT = Path(__file__).resolve().parents[2]

# Baseline 0.500, 0.501, 0.502: mean 0.501, sd 0.001.  A level with the same spread and 3 seeds
# has a drop interval of drop +- t(0.975, 4) * sqrt(2 * 0.001^2 / 3) * 100 = +- 2.776 * 0.0816
# = +- 0.227 points (Welch's df is 4 for equal spreads and seeds).
BASE = [0.500, 0.501, 0.502]


def level(multiple: float, drop_points: float) -> Level:
    d = drop_points / 100
    return Level(target=multiple, multiple=multiple, accuracies=tuple(a - d for a in BASE))


def rungs(b) -> list[LadderRung]:
    return [LadderRung(target=j.target, multiple=j.multiple, seeds=len(j.accuracies), drop_points=j.drop_points,
                       within=j.within, judgement=j.judgement) for j in b.levels]


def within_inconclusive_beyond():
    # drops 0 [-0.23, +0.23] within; 1.3 [1.07, 1.53] straddles 1.4: inconclusive; 2.0 [1.77, 2.23] beyond
    return find_budget(BASE, [level(10, 0.0), level(100, 1.3), level(1000, 2.0)], tolerance_points=1.4)


def test_a_within_inconclusive_beyond_curve_has_three_zones_at_its_levels():
    b = within_inconclusive_beyond()
    assert [j.judgement for j in b.levels] == ["within", "inconclusive", "beyond"]
    assert b.levels[1].drop_ci == pytest.approx((1.3 - 0.2267, 1.3 + 0.2267), abs=1e-3)
    ladder = rungs(b)
    assert budget_under(ladder, "strict", 1.4)[:2] == (10, "reached")
    assert first_harmful(ladder) == 1000
    assert [zone_of(m, 10, 1000) for m in (5, 10, 11, 999, 1000, 5000)] == [
        "shown_safe", "shown_safe", "not_shown_safe", "not_shown_safe", "shown_harmful", "shown_harmful"]


def test_admission_verdicts_in_each_zone():
    # budget 10x, first harmful level 1000x
    assert decide(8, [6, 9.9], 10, "reached", 128, harmful=1000).verdict == "pass"
    assert decide(10, [8, 12], 10, "reached", 128, harmful=1000).verdict == "inconclusive"
    between = decide(300, [200, 400], 10, "reached", 128, harmful=1000)
    assert between.verdict == "not_shown_safe" and "1e+03x, the first level shown to hurt" in between.reason
    straddling_harm = decide(1000, [800, 1200], 10, "reached", 128, harmful=1000)
    assert straddling_harm.verdict == "not_shown_safe"  # not wholly above the harmful level
    harmful = decide(1500, [1200, 1800], 10, "reached", 128, harmful=1000)
    assert harmful.verdict == "fail" and "shown harmful" in harmful.reason
    # no level shown to hurt: above the budget is never "fail", however far
    assert decide(1e6, [9e5, 1.1e6], 10, "reached", 128).verdict == "not_shown_safe"


def test_what_would_decide_a_check_between_the_zones():
    ladder = rungs(within_inconclusive_beyond())
    # a check with CI up to 400x: the 100x level (inconclusive, 3 seeds) must pass, and the gap
    # between 100x and the harmful 1000x is tested by a level at the check's 400x
    d = to_decide(ladder, 10, 1000, up_to=400)
    assert d is not None
    assert d.seeds_at == (100,) and d.seeds_now == (3,) and d.max_seeds == 6
    assert d.between == (100, 1000) and d.new_level == 400
    assert d.levels == (10, 100, 400, 1000)
    assert "more seeds (up to 6) at 100x (3 seeds now)" in d.words() and "between 100x and 1e+03x" in d.words()
    assert "--levels 10,100,400,1000 --max-seeds 6" in d.command()
    # the zone above the budget by default: the next level, and a bisection between 10x and 100x
    default = to_decide(ladder, 10, 1000)
    assert default is not None and default.seeds_at == (100,) and default.between == (10, 100)
    assert default.new_level == pytest.approx(31.6)  # sqrt(10 * 100)
    assert to_decide(ladder, 10, 1000, up_to=5) is None  # shown safe
    assert to_decide(ladder, 10, 1000, up_to=2000) is None  # shown harmful


def test_the_papers_criterion_reads_the_same_curve_by_its_mean_drop():
    # drops 0, 1.3, 1.3: every mean under 1.4, the last two intervals straddle it
    straddling = find_budget(BASE, [level(10, 0.0), level(100, 1.3), level(1000, 1.3)], tolerance_points=1.4)
    ladder = rungs(straddling)
    assert budget_under(ladder, "strict", 1.4)[:2] == (10, "reached")
    assert budget_under(ladder, "mean", 1.4)[:2] == (1000, "not_reached")
    assert first_harmful(ladder) is None
    # with a 2.0-point drop at 1000x the paper's budget stops at 100x, the strict one still at 10x
    assert budget_under(rungs(within_inconclusive_beyond()), "mean", 1.4)[:2] == (100, "reached")


def test_the_committed_reproduction_gives_the_issues_paper_budgets():
    # Issue 37: under the paper's wording the same data give OPD 7,782x, GRPO 85.5x and
    # sampled-token OPD + TIS 11.5x instead of 4,031x, 36.3x and 2.70x; no level there was beyond.
    results = json.loads((ROOT / "docs" / "budget" / "results.json").read_text())["budgets"]
    expected = {"opd:full": (4031, 7782), "grpo": (36.3, 85.5), "opd:sampled+tis": (2.70, 11.5)}
    for method, (strict, paper) in expected.items():
        ladder = [LadderRung.of_curve(c) for c in results[method]["curve"]]
        assert budget_under(ladder, "strict", 1.4)[0] == pytest.approx(strict, rel=2e-3)
        assert budget_under(ladder, "mean", 1.4)[0] == pytest.approx(paper, rel=2e-3)
        assert first_harmful(ladder) is None


def test_a_spec_places_a_check_under_its_teams_criterion():
    ladder = rungs(within_inconclusive_beyond())
    spec = BudgetSpec(checkpoint="/m", task="t", method="opd:full", metric="k3", unit_engine="hf", budget=10,
                      status="reached", ladder=ladder)
    assert spec.harmful == 1000 and spec.under("mean") == (100, "reached") and spec.under("strict") == (10, "reached")
    old = BudgetSpec(checkpoint="/m", task="t", method="opd:full", metric="k3", unit_engine="hf", budget=10,
                     status="reached")
    assert old.harmful is None and old.to_decide() is None  # a spec from before the zones: nothing shown harmful


def calibration(curve_levels, seeds_by_level) -> CalibrationResult:
    b = find_budget(BASE, curve_levels, tolerance_points=1.4)
    curve = [{"target": j.target, "multiple": j.multiple, "multiple_ci": None, "setting": {"noise_sigma": 0.01},
              "accuracies": list(j.accuracies) * seeds_by_level[i], "accuracy_mean": j.accuracy_mean,
              "accuracy_sd": j.accuracy_sd, "drop_points": j.drop_points, "within": j.within,
              "drop_ci": list(j.drop_ci), "judgement": j.judgement} for i, j in enumerate(b.levels)]
    return CalibrationResult.model_validate({
        "checkpoint": "/m", "task": "t", "method": "opd:full", "metric": "k3", "unit_engine": "hf", "budget": b.budget,
        "status": b.status, "teacher": None, "bracket": list(b.bracket), "curve": curve,
        "baseline": {"accuracies": BASE, "mean": b.baseline_mean, "sd": b.baseline_sd}, "rule": "strict",
        "steps": 40, "seeds": 3, "extensions": 0, "noise": []})


def test_the_calibration_table_names_each_levels_judgement_and_its_seeds():
    r = calibration([level(10, 0.0), level(100, 1.3), level(1000, 2.0)], [1, 3, 2])  # 3, 9 and 6 seeds run
    text = format_calibration(r)
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.split() and line.split()[0]
            in ("10x", "100x", "1000x")}
    assert rows["10x"][-1] == "within" and rows["100x"][-1] == "inconclusive" and rows["1000x"][-1] == "beyond"
    assert (rows["10x"][3], rows["100x"][3], rows["1000x"][3]) == ("3", "9", "6")
    assert "40 steps x 3-9 seeds per level" in text and "40 steps x 3 seeds," not in text
    assert "shown safe up to 10x; shown harmful from 1000x" in text
    assert "the paper's (mean drop <= tolerance) up to 100x" in text


def test_the_issues_fp8_check_above_grpo_and_tis_budgets_is_not_shown_safe_not_fail():
    # Issue 37: FP8 W + KV at 47.2x [38.6, 58.9] "failed" GRPO's budget although GRPO's 55.8x
    # level showed +0.7 [-0.4, +1.9] points, and failed sampled-token OPD + TIS whose levels showed
    # no drop up to 11.5x.  No level of either was beyond: not shown safe, with what would decide it.
    results = json.loads((ROOT / "docs" / "budget" / "results.json").read_text())["budgets"]
    for method, seeds_at in (("grpo", (55.8, 85.5)), ("opd:sampled+tis", (3.25, 5.59, 11.5, 85.5))):
        b = results[method]
        spec = BudgetSpec(checkpoint="/m", task="t", method=method, metric="k3", unit_engine="vllm", budget=b["budget"],
                          status=b["status"], ladder=[LadderRung.of_curve(c) for c in b["curve"]])
        d = decide(47.2, [38.6, 58.9], spec.budget, spec.status, 512, spec.harmful)
        assert d.verdict == "not_shown_safe" and "no calibrated level was shown to hurt" in d.reason
        undecided = spec.to_decide(58.9)
        assert undecided is not None and undecided.seeds_at == pytest.approx(seeds_at, rel=2e-3)
        assert undecided.between == pytest.approx((seeds_at[-2], 85.5), rel=2e-3)  # the levels around 58.9x
