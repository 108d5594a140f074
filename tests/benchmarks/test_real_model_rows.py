"""``bench_real_model.py --record``: the README rows say what ran on SmolLM2, from its result
file's figures: the check's time, the ladder's groups, the scans' spread and recipe."""
from __future__ import annotations

import sys
from argparse import Namespace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_real_model import LADDER, figure_rows  # noqa: E402

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
    result = {"models": {"toy": {"rows": []}, "smollm2": {
        "check": {"wall_s": 177.2, "error": "", "multiple": 13.97, "ci": [12.8, 15.4]},
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
    result = {"models": {"smollm2": {"rows": rows, "check": {"wall_s": 9.0, "error": "exit 1"}}}}
    assert figure_rows(result, ARGS) == []
    assert figure_rows({"models": {"toy": {"rows": ladder([1.0] * len(LADDER))}}}, ARGS) == []
