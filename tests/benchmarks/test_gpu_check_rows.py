"""``gpu_check.py --record`` on a lent GPU: the README's two GPU rows, built from the result
file the H200 lease wrote (docs/benchmarks/gpu-h200.json) and checked against the figures its
docs page gives; ``figures.py --record-from`` stores them with the GPU host's stamp."""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import figures  # noqa: E402
from gpu_check import figure_rows  # noqa: E402

H200 = json.loads((ROOT / "docs" / "benchmarks" / "gpu-h200.json").read_text())


def test_the_h200_runs_rows_say_what_its_page_says():
    rows = {row["id"]: row for row in figure_rows(H200, prompts=512)}
    assert sorted(rows) == ["gpu-admission", "gpu-fp8"]
    # docs/benchmarks/gpu-check.md: 15.9x / 15.3x, 12.4x / 12.0x; SmolLM2 W8A8 30.3x / 27.4x
    assert rows["gpu-fp8"]["latest"] == "15.9x vs 15.3x / 12.4x vs 12.0x; 30.3x vs 27.4x (CIs overlap)"
    assert "NVIDIA H200" in rows["gpu-fp8"]["what"] and "512 prompts" in rows["gpu-fp8"]["what"]
    assert "SmolLM2 W8A8, 64 x 128" in rows["gpu-fp8"]["what"]
    # the same page: warm 7.66 s, cold 24.0 s, floor 4.08 s, 20.6 GiB
    assert rows["gpu-admission"]["latest"] == "7.66 s / 23.98 s / 4.08 s, 20.6 GiB"
    assert "64 x 64" in rows["gpu-admission"]["what"]


def test_intervals_apart_are_counted():
    out = copy.deepcopy(H200)
    out["fp8_real_vs_emulated"][1]["multiple_ci"] = [20.0, 25.0]  # per-tensor emulated, above real's [12.7, 19.7]
    row = next(row for row in figure_rows(out, prompts=512) if row["id"] == "gpu-fp8")
    assert row["latest"].endswith("(1 of 3 CIs apart)")


def test_a_cpu_dry_run_or_a_missing_check_makes_no_row():
    assert figure_rows({**H200, "device": "cpu", "gpu": None}, prompts=8) == []
    tiny = copy.deepcopy(H200)
    tiny["qwen15b_admission"]["shape"] = "tiny (CPU dry run)"
    del tiny["smollm2_gsm8k"]
    assert figure_rows(tiny, prompts=512) == []


def test_rows_from_another_host_keep_its_stamp(tmp_path):
    table = tmp_path / "figures.json"
    table.write_text(json.dumps({"rows": []}))
    stamp = {"by": "benchmark", "command": "python benchmarks/gpu_check.py --record", "commit": "5af929a",
             "date": "2026-12-04", "load": "0.3 → 1.2"}
    result = tmp_path / "gpu_check.json"
    result.write_text(json.dumps({**H200, "figures": {"rows": figure_rows(H200, prompts=512), "stamp": stamp}}))
    figures.record_from(result, table)
    rows = figures.load_figures(table)
    assert [row["id"] for row in rows] == ["gpu-fp8", "gpu-admission"]
    assert all(row["commit"] == "5af929a" and row["load"] == "0.3 → 1.2" for row in rows)
    result.write_text(json.dumps(H200))  # run without --record
    with pytest.raises(SystemExit, match="no rows"):
        figures.record_from(result, table)
