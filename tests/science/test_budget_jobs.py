"""The budget kinds on the fixture student, from the command line: noise solved to a target,
admission verdicts, refusals, and a (tiny) calibration run in process."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from workers.science.budget.config import CalibrationJobConfig
from workers.science.config import MismatchJobConfig, RolloutConfig
from workers.science.entrypoints import get_kind
from workers.science.fingerprint import checkpoint_digest
from workers.science.kinds import Kind
from workers.science.mismatch import run_mismatch


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workers", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture()
def budget_file(tmp_path, student):
    def make(budget: float, **over) -> str:
        spec = {"checkpoint": student, "checkpoint_hash": checkpoint_digest(student), "task": "arithmetic:1",
                "method": "opd:full", "metric": "k3", "unit_engine": "hf", "budget": budget, "status": "reached"}
        spec.update(over)
        path = tmp_path / f"budget-{budget}.json"
        path.write_text(json.dumps(spec))
        return str(path)
    return make


def rung(multiple: float, drop: float, judgement: str, seeds: int = 3) -> dict:
    """A judged level of a budget's ladder (``LadderRung``)."""
    return {"target": multiple, "multiple": multiple, "seeds": seeds, "drop_points": drop,
            "within": judgement == "within", "judgement": judgement}


def yaml_file(tmp_path, text: str) -> str:
    path = tmp_path / f"rollout-{abs(hash(text))}.yaml"
    path.write_text(text)
    return str(path)


def test_noise_solved_for_a_target_lands_within_a_fresh_measurements_ci(student, tmp_path):
    r = cli("noise-solve", "--model", student, "--config", yaml_file(tmp_path, "{}"), "--target-multiple", "20",
            "--prompts", "256", "--reference-engine", "hf", "--threads", "1", "--json")
    assert r.returncode == 0, r.stderr
    solved = json.loads(r.stdout)
    assert abs(solved["multiple"] / 20 - 1) <= 0.25 or len(solved["trials"]) == 8
    # An independent measurement: other prompts (seed 7) and another noise draw's effect measured afresh.
    check = run_mismatch(MismatchJobConfig(model=student, rollout=RolloutConfig(noise_sigma=solved["sigma"]),
                                           prompts=256,
                                           seed=7, reference_engine="hf", target_ci=0.0,
                                           threads=1)).model_dump(mode="json")
    lo, hi = check["multiple_ci"]
    assert lo <= 20 <= hi, (solved, check["multiple"], check["multiple_ci"])


def test_admission_of_bf16_passes_and_a_pushed_config_fails(student, tmp_path, budget_file):
    bf16 = cli("admit", "--model", student, "--config", yaml_file(tmp_path, "{}"), "--budget", budget_file(5.0),
               "--prompts", "64", "--threads", "1", "--json")
    assert bf16.returncode == 0, bf16.stderr
    report = json.loads(bf16.stdout)
    assert report["verdict"] == "pass" and report["identical_to_unit"] and report["multiple"] == pytest.approx(1.0)
    # 5x within, 6x beyond (its drop wholly above the tolerance): from 6x on is shown harmful
    harmful_at_6 = budget_file(5.0, ladder=[rung(5.0, 0.0, "within"), rung(6.0, 3.0, "beyond")])
    noisy = cli("admit", "--model", student, "--config", yaml_file(tmp_path, "noise_sigma: 0.3\n"), "--budget",
                harmful_at_6, "--prompts", "64", "--threads", "1", "--json")
    assert noisy.returncode == 0, noisy.stderr
    report = json.loads(noisy.stdout)
    assert report["multiple_ci"][0] > 6.0 and report["verdict"] == "fail" and "shown harmful" in report["reason"]
    assert report["margin"] == pytest.approx(5.0 / report["multiple"])
    assert report["drift"]["prompts"] == 32 and 0.0 <= report["drift"]["diverged_fraction"] <= 1.0


def test_above_the_budget_but_below_any_harm_is_not_shown_safe_and_says_what_would_decide(student, tmp_path,
                                                                                          budget_file):
    # 5x within, 6x inconclusive (3 seeds), nothing shown harmful below 1e9x
    undecided = budget_file(5.0, ladder=[rung(5.0, 0.0, "within"), rung(6.0, 1.2, "inconclusive"),
                                         rung(1e9, 9.0, "beyond")])
    r = cli("admit", "--model", student, "--config", yaml_file(tmp_path, "noise_sigma: 0.3\n"), "--budget", undecided,
            "--prompts", "64", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("NOT_SHOWN_SAFE (above the budget, not shown harmful): the 95% CI")
    assert "shown harmful from 1e+09x" in r.stdout
    assert "to decide: more seeds (up to 6) at 6x (3 seeds now), or a level at about" in r.stdout
    assert "--levels 5,6," in r.stdout and "--max-seeds 6" in r.stdout


def test_where_the_unit_measures_zero_the_admission_decides_on_the_absolute_k3(student, tmp_path, budget_file):
    """The hf BF16 engine against a BF16 trainer computes the trainer's own logprobs: the unit's
    k3 is 0 and every multiple undefined.  The verdict then compares the config's absolute k3
    (with its CI) with the budget's (the budget multiple times its unit's k3 at calibration)."""
    fp8 = yaml_file(tmp_path, "weights: fp8_e4m3\n")

    def admit(**spec) -> dict:
        r = cli("admit", "--model", student, "--config", fp8, "--budget",
                budget_file(spec.pop("budget"), unit_trainer="bf16", **spec), "--prompts", "32", "--threads", "1",
                "--json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    roomy = admit(budget=1000.0, reference_value=1e-3)  # an absolute budget of 1.0: far above any FP8 k3
    if roomy["multiple"] is not None:
        pytest.skip(f"this CPU's BF16 engine and BF16 trainer differ (unit k3 {roomy['reference_value']:.3g})")
    assert roomy["multiple"] is None and roomy["decided_on"] == "absolute"
    assert roomy["absolute_budget"] == pytest.approx(1.0) and 0 < roomy["value_ci"][1] < 1.0
    assert roomy["verdict"] == "pass" and "undefined" in roomy["reason"]
    # sampling stopped on the absolute k3's CI, not at the token budget chasing a multiple that has none
    assert roomy["precision"]["of"] == "absolute" and roomy["precision"]["stopped"] == "precision", roomy["precision"]
    assert roomy["precision"]["relative_half_width"] <= roomy["precision"]["target_ci"]
    # 1e-9: far below the FP8 config's k3 (its CI's low end), as is the harmful level's 2e-9
    tight = admit(budget=1.0, reference_value=1e-9, ladder=[rung(1.0, 0.0, "within"), rung(2.0, 3.0, "beyond")])
    assert tight["value_ci"][0] > 2e-9 and tight["verdict"] == "fail"
    unrecorded = admit(budget=1000.0)  # a budget that never recorded its unit's value cannot be turned absolute
    assert unrecorded["verdict"] == "inconclusive" and "records no unit value" in unrecorded["reason"]


@pytest.mark.parametrize("over, flag, message", [
    ({"checkpoint_hash": "0" * 64}, None, "calibrated on checkpoint"),
    ({"task": "arithmetic:3"}, None, "calibrated on task 'arithmetic:3'"),
    ({"metric": "chi3"}, None, "--budget (metric): must be one of"),
    ({}, ("--metric", "k1"), "differs from the budget's metric 'k3'"),
    # the unit pair's trainer half: a budget against a bf16 trainer judges no fp32-trainer multiple, and a budget
    # calibrated before the pair was named (an fp32 trainer) no bf16-trainer one
    ({"unit_trainer": "bf16"}, ("--trainer-dtype", "fp32"), "against the bf16 trainer (hf BF16 engine / bf16 trainer)"),
    ({}, ("--trainer-dtype", "bf16"), "against the fp32 trainer (hf BF16 engine / fp32 trainer), this check's is bf16"),
])
def test_admission_refuses_a_budget_that_does_not_apply(student, tmp_path, budget_file, over, flag, message):
    args = ["admit", "--model", student, "--config", yaml_file(tmp_path, "weights: fp8_e4m3\n"),
            "--budget", budget_file(10.0, **over), "--prompts", "16", "--json", *(flag or ())]
    r = cli(*args)
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert message in r.stderr


@pytest.mark.parametrize("args, message", [
    (("--tolerance", "-1"), "--tolerance: must be at least 0"),
    (("--levels", "10"), "--levels: has too few entries (at least 2)"),
    (("--levels", "100,10"), "strictly ascending"),
    (("--metric", "k9"), "invalid choice: 'k9'"),
])
def test_calibration_bad_input_is_refused(student, teacher, args, message):
    r = cli("calibrate", "--model", student, "--teacher", teacher, *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr


@pytest.mark.parametrize("text, message", [
    ("name: fp8\n", "--transfer must be a YAML list, got dict"),
    ("[{name: bf16}]\n", "the BF16 engine synchronously has no mismatch to transfer"),
    ("[{name: fp8, rollout: {weights: fp9}}]\n", "weights"),
    ("- [unclosed\n", "--transfer is not valid YAML"),
])
def test_a_bad_transfer_file_is_refused(student, teacher, tmp_path, text, message):
    path = tmp_path / "transfer.yaml"
    path.write_text(text)
    r = cli("calibrate", "--model", student, "--teacher", teacher, "--transfer", str(path))
    assert r.returncode == 2 and message in r.stderr and r.stdout == "", r.stderr


def test_a_real_calibration_whose_baseline_does_not_learn_ends_uninformative(student, teacher):
    # Two steps of batch 8 teach the fixture student nothing measurable: the baseline's gain cannot clear the
    # tolerance, so the calibration stops after the baseline and its noise solves, with no budget.
    cfg = CalibrationJobConfig(model=student, teacher=teacher, levels=[10.0, 100.0], seeds=2, steps=2, batch_size=8,
                               eval_prompts=20, measure_prompts=256, reference_engine="hf", max_extensions=0,
                               threads=1, device="cpu")
    r = get_kind(Kind.CALIBRATION).run(cfg).model_dump(mode="json")  # its children run here, one after the other
    assert r["status"] == "uninformative" and r["budget"] is None and r["curve"] == []
    assert r["method"] == "opd:full" and r["unit_engine"] == "hf" and r["checkpoint_hash"] == checkpoint_digest(student)
    learned = r["learning"]
    assert learned["required_points"] == 1.4 and learned["seeds"] == 2 and not learned["informative"]
    assert learned["gain_points"] == pytest.approx(100 * (learned["final_mean"] - learned["start_mean"]))
    assert learned["gain_low"] is None or learned["gain_low"] <= 1.4
    assert r["noise"][0]["sigma"] < r["noise"][1]["sigma"]  # the noise solves ran meanwhile: more mismatch, more noise
    assert "uninformative" in r["message"] and "steps" in r["message"]


def test_the_calibration_example_offered_on_the_form_learns(student, teacher):
    # The form's example is what a first user submits: its BF16 baseline must clear the required gain by far,
    # or the example ends uninformative.  One seed of its baseline run, trained for real.
    example = get_kind(Kind.CALIBRATION).example(student)
    cfg = CalibrationJobConfig.model_validate({**example, "teacher": teacher, "device": "cpu", "threads": 1})
    baseline = get_kind(Kind.TRAIN).config.model_validate(cfg.training_config(seed=cfg.seed, eval_every=0,
                                                                              checkpoint_every=0))
    trained = get_kind(Kind.TRAIN).run(baseline)
    assert trained.final_accuracy - trained.start_accuracy > 0.2, (trained.start_accuracy, trained.final_accuracy)


def test_the_example_calibration_decides_a_budget_at_the_real_tolerance(student, teacher):
    """The Budgets page's example, as shipped (100 steps x 256, ladder 100x and 1,000x, 3 seeds up
    to 8), decides at the 1.4-point tolerance: a budget, not undecided or uninformative.  Every
    level's judgement is re-derived here from its seeds' accuracies: its drop, the baseline's mean
    minus its own, and a level shown within has the upper end of its drop's interval inside the
    tolerance, which for a drop of 0 with no spread on either side is the drop itself."""
    example = get_kind(Kind.CALIBRATION).example(student)
    cfg = CalibrationJobConfig.model_validate({**example, "teacher": teacher, "device": "cpu", "threads": 1})
    assert cfg.tolerance == 1.4 and cfg.levels == [100.0, 1000.0]  # the paper's tolerance, the example's ladder
    r = get_kind(Kind.CALIBRATION).run(cfg)
    assert r.status in ("reached", "not_reached"), r.message
    assert r.stores_budget and r.budget is not None and r.curve
    base = r.baseline.accuracies
    assert len(base) >= 3 and r.learning is not None and r.learning.informative
    for level in r.curve:
        drop = 100 * (sum(base) / len(base) - sum(level.accuracies) / len(level.accuracies))
        assert level.drop_points == pytest.approx(drop, abs=1e-9)
        if level.within:
            assert level.drop_ci is not None and level.drop_ci[1] <= 1.4
            if len(set(base)) == len(set(level.accuracies)) == 1:  # no spread: the interval is the drop
                assert level.drop_ci[0] == pytest.approx(drop, abs=1e-9) == level.drop_ci[1]
    if r.status == "not_reached":  # every level within: the budget is at least the highest level measured
        assert all(level.within for level in r.curve)
        assert r.budget >= max(level.multiple for level in r.curve)


@pytest.mark.parametrize("shown, warned", [([], True), (["quantization"], False), (["quantization+staleness"], False),
                                           (["staleness"], True)])
def test_admission_names_the_budgets_source_and_warns_on_a_source_never_shown_to_transfer(student, tmp_path,
                                                                                          budget_file, shown, warned):
    from workers.science.budget.config import AdmissionJobConfig

    spec = json.loads(open(budget_file(1e6, shown_to_transfer=shown)).read())
    cfg = AdmissionJobConfig(model=student, rollout=RolloutConfig(weights="fp8_e4m3"), budget=spec, prompts=16,
                             drift=False, reference_engine="hf", threads=1)
    verdict = get_kind(Kind.ADMISSION).run(cfg)
    assert verdict.calibrated_with == "weight noise re-drawn every step"  # a budget that names no source
    warnings = verdict.transfer_warnings or []
    assert bool(warnings) == warned
    if warned:
        assert warnings == [w for w in warnings if "quantization was never shown to transfer" in w]
