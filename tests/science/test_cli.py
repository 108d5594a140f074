import json

import pytest

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
    assert main(["mismatch", "--model", student, "--config", fp8_yaml, "--prompts", "16", "--reference-engine", "hf"]) == 0
    out = capsys.readouterr().out
    assert "x BF16" in out and "k3" in out and "kl_full" in out


def test_sensitivity_and_drift(teacher, fp8_yaml, capsys):
    assert main(["sensitivity", "--model", teacher, "--config", fp8_yaml, "--prompts", "16", "--target", "1.2", "--json",
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
                        "--prompts", "8", "--json", "--reference-engine", "hf"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["tokens"] > 0
