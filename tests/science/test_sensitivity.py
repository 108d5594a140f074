import pytest

from workers.science.capacity import kv_bytes_per_token, kv_capacity
from workers.science.config import RolloutConfig, SensitivityJobConfig
from workers.science.reporting import RecordingReporter
from workers.science.sensitivity import run_sensitivity


def test_kv_capacity_by_hand():
    conf = {"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 512}
    # 2 (K,V) * 2 heads * 64 dims * 2 bytes * 4 layers
    assert kv_bytes_per_token(conf, [None] * 4) == 2 * 2 * 64 * 2 * 4
    assert kv_capacity(conf, ["fp8_e4m3"] * 4)["capacity_ratio"] == pytest.approx(2.0)
    # one layer kept in BF16: 4*2 / (3*1 + 2) = 1.6
    assert kv_capacity(conf, ["fp8_e4m3"] * 3 + [None])["capacity_ratio"] == pytest.approx(8 / 5)
    assert kv_capacity(conf, [None] * 4)["capacity_ratio"] == 1.0


def sensitivity(teacher, target, rep=None):
    # No rounds of more prompts for a tied top: the recipe's trials and the ranking share their prompts here.
    cfg = SensitivityJobConfig(model=teacher,
                               rollout=RolloutConfig(weights="fp8_e4m3", kv_cache="fp8_e4m3", noise_sigma=0.2),
                               prompts=96, bootstrap=100, target=target, device="cpu", reference_engine="hf",
                               separate_budget=0.0)
    return run_sensitivity(cfg, rep).model_dump(mode="json")


def test_per_layer_ranking_and_recipe(teacher):
    rep = RecordingReporter()
    r = sensitivity(teacher, 1.5, rep)
    assert [u["rank"] for u in r["ranking"]] == [1, 2]
    mults = [u["multiple"] for u in r["ranking"]]
    assert mults == sorted(mults, reverse=True) and all(m > 1.5 for m in mults)
    assert r["multiple"] > 1.5
    # each layer alone is above 1.5x, so only keeping both (the BF16 engine: no gain) would reach it
    rec = r["recipe"]
    assert rec["reached"] is False and rec["keep_bf16"] is None and "no gain" in rec["note"]
    assert all(t["kept"] < 2 for t in rec["trials"])
    assert r["kv_cache"]["capacity_ratio"] == pytest.approx(2.0)
    assert r["unit"]["engine"] == "hf" and r["granularity"] == "layer"  # the BF16 unit, and what one part is
    assert "sensitivity/multiple" in {k for _, k, _ in rep.points}
    # a target the least sensitive layer alone meets, its whole CI under it (the recipe decides on the CI, as the
    # admission does): keep the most sensitive one
    target = r["ranking"][1]["multiple_ci"][1] * 1.05
    rec = sensitivity(teacher, target)["recipe"]
    top = int(r["ranking"][0]["unit"].split()[1])
    assert rec["reached"] and rec["keep_bf16"] == [top] and rec["multiple_ci"][1] <= target
    # a target between the point and the CI's upper end: the point is under it, but not shown under it
    between = (r["ranking"][1]["multiple"] + r["ranking"][1]["multiple_ci"][1]) / 2
    assert sensitivity(teacher, between)["recipe"]["reached"] is False
    # per-layer KV dtypes: the kept layer pulls the ratio below 2x: 2 layers * 2 bytes / (1 + 2)
    assert rec["kv_cache"]["capacity_ratio"] == pytest.approx(4 / 3)


def test_a_config_already_under_target_needs_no_recipe(teacher):
    cfg = SensitivityJobConfig(model=teacher, rollout=RolloutConfig(weights="fp8_e4m3"), prompts=48, bootstrap=100,
                               target=1e6, device="cpu", reference_engine="hf")
    assert run_sensitivity(cfg).model_dump(mode="json")["recipe"]["keep_bf16"] == []


def test_module_units(teacher):
    cfg = SensitivityJobConfig(model=teacher, rollout=RolloutConfig(kv_cache="fp8_e4m3", weights="int8"), prompts=32,
                               bootstrap=0, unit="module", device="cpu", reference_engine="hf")
    r = run_sensitivity(cfg).model_dump(mode="json")
    assert r["granularity"] == "module" and r["unit"]["engine"] == "hf"  # the old spelling `unit` still works
    units = {u["unit"] for u in r["ranking"]}
    assert "model.layers.0.self_attn.kv_cache" in units and "model.layers.1.mlp.down_proj" in units
    assert len(units) == 2 * 7 + 2


def test_the_recipe_search_finds_the_smallest_passing_count():
    from workers.science.sensitivity import smallest_passing

    for threshold in range(1, 9):
        tried = []
        assert smallest_passing(
            1, 8, lambda k, tried=tried, threshold=threshold: tried.append(k) or k >= threshold) == threshold
        assert len(tried) <= 4  # binary search: ceil(log2(8)) + 1 trials at most
    assert smallest_passing(1, 8, lambda k: False) is None


def test_the_admission_recipe_offers_the_ranked_layers_in_bf16_even_when_no_target_is_met(teacher):
    # A budget of 1.2x that no FP8 candidate nor the scan's target search meets (each layer alone is above it):
    # the candidates still include the most aggressive recipe with the ranking's top layer kept in BF16.
    from workers.science.budget.recipe import cheapest_within, keep_entry, recipe_within_budget
    from workers.science.config import MismatchJobConfig

    measurement = MismatchJobConfig(model=teacher, rollout=RolloutConfig(weights="fp8_e4m3", kv_cache="fp8_e4m3",
                                                                         noise_sigma=0.2),
                                    prompts=48, bootstrap=100, device="cpu", reference_engine="hf")
    out = recipe_within_budget(measurement, budget=1.2, margin=1.0, reporter=RecordingReporter())
    top = out["layers"][0]["unit"]
    assert keep_entry(top) == int(top.split()[1]) and keep_entry("model.layers.0.mlp.up_proj") == \
        "model.layers.0.mlp.up_proj"
    spared = [p for p in out["recipe_candidates"] if p["rollout"]["keep_bf16"] == [keep_entry(top)]]
    assert len(spared) == 1 and f"with {top} in BF16" in spared[0]["label"]
    # two layers: keeping both would be the BF16 engine, so only the top one is offered
    assert all(len(p["rollout"]["keep_bf16"]) < 2 for p in out["recipe_candidates"])
    # the decision is on the CI's upper end: recompute it by hand from the candidates
    ok = [p for p in out["recipe_candidates"] if p["ci"] and p["ci"][1] is not None and p["ci"][1] * 1.0 < 1.2]
    assert (out["recipe"] is None) == (not ok)
    assert out["recipe"] == cheapest_within(out["recipe_candidates"], 1.2, 1.0)


def test_parts_whose_cis_overlap_share_a_tier_and_the_report_says_their_order_is_not_known():
    from workers.science.sensitivity import ranking_warnings, tiers

    ranked = [{"unit": "layer 4", "multiple": 9.0, "multiple_ci": [7.0, 11.0]},
              {"unit": "layer 1", "multiple": 8.0, "multiple_ci": [6.0, 10.0]},   # reaches 7: tied with the first
              {"unit": "layer 2", "multiple": 5.0, "multiple_ci": [4.0, 6.5]},    # under 7: a new tier
              {"unit": "layer 0", "multiple": 4.5, "multiple_ci": None},          # no CI: nothing separates it
              {"unit": "layer 3", "multiple": 1.2, "multiple_ci": [1.0, 1.4]}]    # under 4: a new tier
    assert tiers(ranked) == [1, 1, 2, 2, 3]
    for row, tier in zip(ranked, tiers(ranked), strict=True):
        row["tier"] = tier
    (warning,) = ranking_warnings(ranked, {"rounds": 0, "prompts": 64})
    assert "top 2 parts overlap (layer 4, layer 1) on 64 prompts" in warning and "separate_budget" in warning
    (again,) = ranking_warnings(ranked, {"rounds": 2, "prompts": 256})
    assert "after 2 more round(s) on 256 prompts" in again
    assert ranking_warnings([dict(ranked[0], tier=1), dict(ranked[2], tier=2)], {"rounds": 0, "prompts": 64}) == []


def test_the_top_tier_is_measured_again_within_its_budget_as_a_fresh_scan_of_those_prompts_would(teacher):
    """The toy's two layers overlap at 16 prompts (FP8 W + KV).  The budget is the scan's own
    measurements: 1.0 x (reference + full config + 2 layers) x 16 = 64 prompt-measurements.
    A round doubles the prompts for the reference and the tied layers: 3 x 16 = 48 (spent 0.75);
    the next would cost 3 x 32 = 96, over what is left, so one round, on 32 prompts.  Each layer's
    multiple then is what a scan of the first 32 prompts measures (prompts and sampling seeds
    follow each prompt's index), and the bar never went back."""
    def scan(prompts: int, separate_budget: float, reporter=None) -> dict:
        cfg = SensitivityJobConfig(model=teacher, rollout=RolloutConfig(weights="fp8_e4m3", kv_cache="fp8_e4m3"),
                                   prompts=prompts, bootstrap=100, device="cpu", reference_engine="hf",
                                   separate_budget=separate_budget)
        return run_sensitivity(cfg, reporter).model_dump(mode="json")

    rep = RecordingReporter()
    r = scan(16, 1.0, rep)
    assert r["separation"] == {"rounds": 1, "prompts": 32, "budget_spent": 0.75, "separated": False}
    assert [row["prompts"] for row in r["ranking"]] == [32, 32] and {row["tier"] for row in r["ranking"]} == {1}
    assert any("after 1 more round(s) on 32 prompts" in w for w in r["warnings"])
    fresh = {row["unit"]: row for row in scan(32, 0.0)["ranking"]}
    for row in r["ranking"]:
        assert row["multiple"] == pytest.approx(fresh[row["unit"]]["multiple"], rel=1e-9)
        assert row["multiple_ci"] == pytest.approx(fresh[row["unit"]]["multiple_ci"], rel=1e-9)
    shown = [fraction for fraction, _ in rep.progress_calls]
    assert all(later >= earlier for earlier, later in zip(shown, shown[1:], strict=False)) and shown[-1] == 1.0
    none = scan(16, 0.0)
    assert none["separation"]["rounds"] == 0 and [row["prompts"] for row in none["ranking"]] == [16, 16]


def plant_a_sensitive_layer(source: str, out, layer: int, channels=(3, 17), scale: float = 64.0) -> str:
    """A copy of ``source`` whose ``layer``'s MLP has two channels scaled up by ``scale`` in
    up_proj and the same channels scaled down in down_proj: the same function (a power of two
    scales exactly in fp32 and BF16), but an outlier that a per-tensor INT8 scale of up_proj must
    cover, so that layer alone quantizes far worse than the others.  (FP8 is a float format: a
    per-tensor scale moves the other rows down in exponent, not in relative precision, and the
    same planting left the FP8 ranking within noise.)"""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(source, out)
    weights = load_file(f"{out}/model.safetensors")
    up, down = f"model.layers.{layer}.mlp.up_proj.weight", f"model.layers.{layer}.mlp.down_proj.weight"
    for c in channels:
        weights[up][c, :] *= scale
        weights[down][:, c] /= scale
    save_file(weights, f"{out}/model.safetensors", metadata={"format": "pt"})
    return str(out)


def test_a_planted_sensitive_layer_is_ranked_first_with_a_ci_clear_of_the_rest(teacher, tmp_path):
    def scan(model):
        cfg = SensitivityJobConfig(model=model, rollout=RolloutConfig(weights="int8", weight_scale="tensor"),
                                   prompts=64, bootstrap=200, device="cpu", reference_engine="hf", task="arithmetic:1")
        return run_sensitivity(cfg).model_dump(mode="json")

    natural = scan(teacher)
    quiet = int(natural["ranking"][-1]["unit"].split()[1])  # plant where the scan found the least
    assert any(w.startswith("ranking:") for w in natural["warnings"]) == (natural["ranking"][-1]["tier"] == 1)
    planted = scan(plant_a_sensitive_layer(teacher, tmp_path / "planted", quiet))
    assert planted["reference_value"] == pytest.approx(natural["reference_value"], rel=1e-6)  # the same function
    first, *rest = planted["ranking"]
    assert first["unit"] == f"layer {quiet}" and first["tier"] == 1
    assert all(first["multiple_ci"][0] > r["multiple_ci"][1] for r in rest)  # clear of the rest
    assert not any(w.startswith("ranking:") for w in planted["warnings"])
