"""The default unit pair must be a unit: the vLLM BF16 engine against a BF16 trainer (the
paper's pair, the default wherever vLLM runs) gives the same k3 in separate processes and at
other thread counts.  If this fails on a machine, the pair is not stable there and the
default (``preflight.unit_trainer``) must not be the paper's pair on it."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from workers.science.preflight import vllm_importable


def unit_k3(student: str, config: str, threads: int) -> dict:
    r = subprocess.run([sys.executable, "-m", "workers", "mismatch", "--model", student, "--config", config,
                        "--prompts", "32", "--reference-engine", "vllm", "--target-ci", "0", "--threads",
                        str(threads), "--json"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.mark.slow
def test_the_papers_pair_repeats_across_processes_and_thread_counts(student, tmp_path):
    if (why := vllm_importable()) is not None:
        pytest.skip(f"vLLM cannot be imported here: {why}")
    config = tmp_path / "fp8.yaml"
    config.write_text("weights: fp8_e4m3\n")
    runs = [unit_k3(student, str(config), threads) for threads in (1, 2)]
    assert {(r["unit"]["engine"], r["unit"]["trainer"]) for r in runs} == {("vllm", "bf16")}  # the default pair
    assert runs[0]["reference_value_ci"][0] > 0  # a unit: every resample of prompts shows it
    assert runs[0]["reference_value"] == runs[1]["reference_value"]  # bit for bit
