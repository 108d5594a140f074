"""``bench_real_model.py --record``: the README rows say what ran on SmolLM2, from its result
file's figures: the check's time, the ladder's groups, the scans' spread and recipe, the drift's
first-token flips under both couplings; and the three models side by side."""
from __future__ import annotations

import sys
from argparse import Namespace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_real_model import LADDER, figure_rows, first_token_flips  # noqa: E402

ARGS = Namespace(prompts=16, max_new_tokens=64, threads=2, target=10.0)


def ladder(multiples: list[float]) -> list[dict]:
    return [{"row": row, "error": "", "multiple": m, "wall_s": 40.0 + i}
            for i, ((row, _), m) in enumerate(zip(LADDER, multiples, strict=True))]


def test_rows_of_a_whole_run():
    # FP8 W x3, W8A8, FP8 KV x2, W + KV, INT8, INT4, noise x2
    multiples = [15.3, 20.4, 18.0, 29.4, 11.6, 10.4, 27.9, 4.74, 1075.0, 1.06, 4.77]
    scan = {"error": "", "wall_s": 460.4, "multiple": 42.0,
            "ranking": [{"unit": "model.layers.29", "multiple": 5.49}, {"unit": "model.layers.1", "multiple": 4.06},
                        {"unit": "model.layers.7", "multiple": 1.5}],
            "recipe": {"reached": True, "keep_bf16": [29, 1], "multiple": 6.23}}
    result = {"models": {"toy": {"prompts": 64, "rows": []}, "smollm2": {
        "prompts": 16, "check": {"wall_s": 177.2, "error": "", "multiple": 13.97, "ci": [12.8, 15.4]},
        "rows": ladder(multiples), "sensitivity_layer": scan}}}
    rows = {row["id"]: row for row in figure_rows(result, ARGS)}
    assert sorted(rows) == ["real-model-check", "real-model-ladder", "real-model-layers"]
    assert rows["real-model-check"]["latest"] == "2 min 57 s (14x the hf BF16 unit)"
    assert rows["real-model-ladder"]["latest"] == ("40-50 s each; FP8 W 15.3-20.4x, W8A8 29.4x, FP8 KV 10.4-11.6x, "
                                                   "INT4 1,075x the hf BF16 unit")
    assert rows["real-model-ladder"]["what"] == ("real model: the ladder of 11 configs, 16 prompts x 64 tokens, "
                                                 "2 threads")
    assert rows["real-model-layers"]["latest"] == ("460 s; each part alone 1.5-5.49x (the most: layers.29); under 10x "
                                                   "keeps 2 of 3 in BF16 (6.23x); the whole config 42x")


def test_a_refused_row_or_another_model_records_nothing_of_it():
    rows = ladder([1.0] * len(LADDER))
    rows[3] = {**rows[3], "error": "refused: no FP8 here"}
    result = {"models": {"smollm2": {"prompts": 16, "rows": rows, "check": {"wall_s": 9.0, "error": "exit 1"}}}}
    assert figure_rows(result, ARGS) == []
    assert figure_rows({"models": {"toy": {"prompts": 16, "rows": ladder([1.0] * len(LADDER))}}}, ARGS) == []


def drift(histogram: dict[str, int], sequences: int, median: float) -> dict:
    return {"error": "", "sequences": sequences, "diverged_fraction": 1.0,
            "first_divergence": {"median": median, "histogram": histogram}}


def test_first_token_flips_are_the_decodes_that_diverge_at_token_zero():
    assert first_token_flips(drift({"0": 5, "3": 20, "7": 7}, 32, 3.0)) == 5 / 32
    assert first_token_flips(drift({"2": 8}, 8, 2.0)) == 0.0


def test_the_drift_row_needs_both_couplings():
    both = {"gumbel": drift({"0": 5, "7": 27}, 32, 7.0), "inverse_cdf": drift({"0": 15, "1": 17}, 32, 1.0)}
    args = Namespace(**{**vars(ARGS), "prompts": 32, "max_new_tokens": 32})
    rows = figure_rows({"models": {"smollm2": {"prompts": 32, "rows": [], "drift": both}}}, args)
    assert [row["id"] for row in rows] == ["prefix-drift"]
    assert rows[0]["latest"] == ("16% / 47% of decodes diverge at the first token; median first divergence at "
                                 "token 7 / 1")
    assert rows[0]["what"].startswith("prefix drift of FP8 W + KV on SmolLM2, 32 prompts x 32 tokens")
    assert rows[0]["page"].endswith("#prefix-drift-and-why-the-first-token-diverged")
    one = {"gumbel": both["gumbel"], "inverse_cdf": {"error": "exit 1"}}
    assert figure_rows({"models": {"smollm2": {"prompts": 32, "rows": [], "drift": one}}}, args) == []


def test_three_models_side_by_side():
    # per model: FP8 W per channel, FP8 KV calibrated, W + KV, INT4 (LADDER rows 1, 4, 6, 8)
    compared = {"toy": [6.49, 11.1, 37.2, 61.0], "smollm2": [16.4, 13.8, 27.4, 1382.0],
                "gemma3": [14.7, 7.45, 13.3, 1456.0]}
    factors = {"toy": None, "smollm2": {"value": 0.944, "ci": [0.68, 1.39]},
               "gemma3": {"value": 1.0, "ci": [0.69, 1.46]}}
    models = {}
    for name, values in compared.items():
        rows = ladder([1.0] * len(LADDER))
        for at, value in zip((1, 4, 6, 8), values, strict=True):
            rows[at] = {**rows[at], "multiple": value, "unit_factor": factors[name]}
        models[name] = {"prompts": 64 if name == "toy" else 8, "rows": rows}
    args = Namespace(**{**vars(ARGS), "prompts": 8, "max_new_tokens": 32})
    rows = {row["id"]: row for row in figure_rows({"models": models}, args)}
    assert rows["three-models"]["what"] == (
        "three models side by side (toy / SmolLM2 / Gemma 3 270M), 64 / 8 / 8 prompts x 32 tokens: FP8 W per "
        "channel, FP8 KV, W + KV, INT4; the vLLM BF16 unit over the hf one")
    assert rows["three-models"]["latest"] == (
        "6.49x / 16.4x / 14.7x; 11.1x / 13.8x / 7.45x; 37.2x / 27.4x / 13.3x; 61x / 1,382x / 1,456x the hf BF16 "
        "unit; unit factor 0.944 [0.68, 1.39] / 1 [0.69, 1.46] (SmolLM2 / Gemma)")
    # without the vLLM unit on a real model, or without Gemma, no such row
    models["gemma3"]["rows"][1] = {**models["gemma3"]["rows"][1], "unit_factor": None}
    assert "three-models" not in {row["id"] for row in figure_rows({"models": models}, args)}
    del models["gemma3"]
    assert "three-models" not in {row["id"] for row in figure_rows({"models": models}, args)}
