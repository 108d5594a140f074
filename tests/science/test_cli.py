import json

import pytest

from tests.dependencies import require_vllm
from workers.science.cli import main


@pytest.fixture
def fp8_yaml(tmp_path):
    p = tmp_path / "fp8.yaml"
    p.write_text("weights: fp8_e4m3\nkv_cache: fp8_e4m3\nsampling: {temperature: 1.0}\n")
    return str(p)


def test_mismatch_json(student, fp8_yaml, capsys, tmp_path):
    dump = tmp_path / "d.jsonl"
    rc = main(["mismatch", "--model", student, "--config", fp8_yaml, "--prompts", "32", "--max-new-tokens", "6",
               "--seed", "3", "--json", "--dump", str(dump), "--reference-engine", "hf", "--target-ci", "0"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert {"metric", "value", "reference_value", "multiple", "multiple_ci", "tokens", "metrics"} <= set(out)
    assert out["seed"] == 3 and out["rollout"]["sampling"]["max_new_tokens"] == 6
    assert len(dump.read_text().splitlines()) == 32


def test_mismatch_table(student, fp8_yaml, capsys):
    assert main(["mismatch", "--model", student, "--config", fp8_yaml, "--prompts", "16", "--reference-engine",
                 "hf"]) == 0
    out = capsys.readouterr().out
    assert "x BF16" in out and "k3" in out and "kl_full" in out


def test_sensitivity_and_drift(teacher, fp8_yaml, capsys):
    assert main(["sensitivity", "--model", teacher, "--config", fp8_yaml, "--prompts", "16", "--target", "1.2",
                 "--json",
                 "--reference-engine", "hf"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert len(s["ranking"]) == 2 and s["recipe"]["target"] == 1.2
    assert main(["drift", "--model", teacher, "--config", fp8_yaml, "--prompts", "16"]) == 0
    assert "identical fraction" in capsys.readouterr().out


def test_bad_config_exits_2_with_one_line_per_problem(student, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("dtype: fp64\nnoise_sigma: -1\n")
    assert main(["mismatch", "--model", student, "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert any(line.strip().startswith("dtype:") for line in err.splitlines())
    assert any(line.strip().startswith("noise_sigma:") for line in err.splitlines())


@pytest.mark.parametrize("yaml_text,needle", [
    ("weights: fp8_e4m3\nkeep_bf16: [9]\n", "out of range"),
    ("weights: fp8_e4m3\nweight_scale: block\nblock_size: 96\n", "does not divide"),
])
def test_model_dependent_errors_exit_2(student, tmp_path, capsys, yaml_text, needle):
    p = tmp_path / "c.yaml"
    p.write_text(yaml_text)
    assert main(["mismatch", "--model", student, "--config", str(p)]) == 2
    assert needle in capsys.readouterr().err


def test_missing_model_and_config(tmp_path, fp8_yaml, capsys):
    assert main(["mismatch", "--model", str(tmp_path / "nope"), "--config", fp8_yaml]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["mismatch", "--model", str(tmp_path), "--config", str(tmp_path / "none.yaml")]) == 2


def test_build_toy_models_cached(toy_dir, capsys):
    assert main(["build-toy-models", "--size", "test", "--out", str(toy_dir)]) == 0
    assert "cached" in capsys.readouterr().out


def test_python_dash_m_workers(student, fp8_yaml):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "workers", "mismatch", "--model", student, "--config", fp8_yaml,
                        "--prompts", "8", "--json", "--reference-engine", "hf"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["tokens"] > 0


# -- finding 8: refusals come first, one line per problem, no traceback --------------------

def error_lines(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return [line for line in err.splitlines() if line.strip()]


def test_a_non_utf8_config_is_one_line(student, tmp_path, capsys):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("# réglage\nweights: fp8_e4m3\n".encode("latin-1"))
    assert main(["mismatch", "--model", student, "--config", str(bad)]) == 2
    (line,) = error_lines(capsys)
    assert "is not UTF-8" in line


def test_an_unknown_hub_id_without_network_is_refused_at_once(fp8_yaml, capsys, monkeypatch, no_weights_read):
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    assert main(["mismatch", "--model", "no-such-org/no-such-model", "--config", fp8_yaml]) == 2
    assert time.perf_counter() - started < 10
    (line,) = error_lines(capsys)
    assert "not a local checkpoint directory" in line and "cannot be reached" in line


def test_a_bad_option_names_the_option_not_the_yaml(student, fp8_yaml, capsys):
    assert main(["mismatch", "--model", student, "--config", fp8_yaml, "--prompts", "0"]) == 2
    lines = error_lines(capsys)
    assert "invalid configuration" not in lines[0] and "options" in lines[0]
    assert lines[1].strip().startswith("--prompts:") and "must be at least 1" in lines[1]


@pytest.mark.parametrize("model,yaml_text,options,needles", [
    ("student", "engine: vllm\n", ["--metric", "tv_full"], ["metric tv_full"]),
    ("student", "weights: fp8_e4m3\n", ["--metric", "kl_full", "--reference-engine", "vllm"], ["metric kl_full"]),
    ("student", "weights: fp8_e4m3\nweight_scale: block\nblock_size: 48\nkeep_bf16: [7]\n", [],
     ["out of range", None]),
    ("teacher", "staleness: 2\n", [], ["no snapshots/index.json"]),
    ("student", "engine: vllm\nnoise_sigma: 0.1\nsampling: {top_p: 0.9}\n", [], ["noise_sigma", "top_p < 1"]),
])
def test_model_and_engine_refusals_come_before_any_weights_are_read(request, tmp_path, capsys, no_weights_read,
                                                                    model, yaml_text, options, needles):
    p = tmp_path / "c.yaml"
    p.write_text(yaml_text)
    assert main(["mismatch", "--model", request.getfixturevalue(model), "--config", str(p), *options]) == 2
    lines = error_lines(capsys)
    assert all(line.startswith("error: ") for line in lines)
    for needle in needles:
        if needle is not None:
            assert any(needle in line for line in lines), (needle, lines)


def test_the_yaml_seed_is_used_and_an_overriding_seed_is_reported(student, tmp_path, capsys):
    p = tmp_path / "seeded.yaml"
    p.write_text("noise_sigma: 0.1\nseed: 5\n")
    common = ["mismatch", "--model", student, "--config", str(p), "--prompts", "8", "--json", "--reference-engine",
              "hf",
              "--target-ci", "0"]
    assert main(common) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["seed"] == 5 and not [w for w in out["warnings"] if w.startswith("seed")]
    assert main(common + ["--seed", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["seed"] == 3
    assert "seed: the job's seed 3 replaces the rollout config's seed 5" in out["warnings"]


def test_drift_uses_the_jobs_bootstrap_count(student, monkeypatch):
    from workers.science import multiple
    from workers.science.config import DriftJobConfig, RolloutConfig
    from workers.science.drift import run_drift

    seen = []
    real = multiple.compare
    monkeypatch.setattr(multiple, "compare",
                        lambda s, m, ref, metric, n_boot, *a: (seen.append(n_boot)
                                                               or real(s, m, ref, metric, n_boot, *a)))
    r = run_drift(DriftJobConfig(model=student, rollout=RolloutConfig(noise_sigma=0.1), prompts=16, device="cpu",
                                 bootstrap=37)).model_dump(mode="json")
    assert seen == [37] and r["bootstrap"] == 37


@pytest.mark.slow
def test_json_stdout_is_json_only_with_the_vllm_engine(student, tmp_path):
    import subprocess
    import sys

    require_vllm()
    cfg = tmp_path / "vllm.yaml"
    cfg.write_text("engine: vllm\n")
    run = subprocess.run([sys.executable, "-m", "workers", "mismatch", "--model", student, "--config", str(cfg),
                          "--prompts", "16", "--target-ci", "0", "--json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    tool = subprocess.run([sys.executable, "-m", "json.tool"], input=run.stdout, capture_output=True, text=True)
    assert tool.returncode == 0, run.stdout[:2000]
    report = json.loads(run.stdout)
    assert report["unit"]["engine"] == "vllm" and report["rollout"]["engine"] == "vllm"
    assert "INFO" in run.stderr  # vLLM's log went to stderr
