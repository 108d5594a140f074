"""``python -m workers derive-student``: a student that keeps some of the teacher's layers,
weights exactly, renumbered; the rest of the folder (tokenizer, task) the teacher's; bad
input exits 2 with one line and writes nothing."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from workers.science.config import ConfigError
from workers.science.derive_student import DERIVED_RECORD, derive_student, kept_layers
from workers.science.fingerprint import checkpoint_digest

ROOT = Path(__file__).resolve().parents[2]


def test_kept_layers_by_stride_keep_the_first_and_the_last():
    assert kept_layers(30, "every:2") == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 29]
    assert kept_layers(6, "every:3") == [0, 3, 5]
    assert kept_layers(6, "4, 1,1") == [1, 4]


@pytest.mark.parametrize("keep, said", [("every:0", "at least 1"), ("every:x", "whole number"), ("7", "layers 0 to 5"),
                                        ("0,1,2,3,4,5", "would be the teacher"), ("a,b", "comma-separated"),
                                        (",", "no layer")])
def test_a_keep_that_makes_no_student_is_refused(keep, said):
    with pytest.raises(ConfigError, match=said):
        kept_layers(6, keep)


def test_the_student_keeps_the_chosen_layers_exactly_and_the_teachers_tokenizer(teacher, tmp_path):
    out = tmp_path / "student-1"
    record = derive_student(teacher, out, keep="1")
    assert record["kept_layers"] == [1] and record["teacher_layers"] == 2
    assert record["teacher_hash"] == checkpoint_digest(teacher) and record["checkpoint_hash"] == checkpoint_digest(out)
    assert json.loads((out / DERIVED_RECORD).read_text())["kept_layers"] == [1]

    big, small = load_file(Path(teacher) / "model.safetensors"), load_file(out / "model.safetensors")
    assert not any(k.startswith("model.layers.1.") for k in small)
    for key, tensor in small.items():  # layer 0 of the student is layer 1 of the teacher; the rest as it was
        source = key.replace("model.layers.0.", "model.layers.1.")
        assert torch.equal(tensor, big[source]), key
    assert len(small) == len(big) - sum(k.startswith("model.layers.0.") for k in big)
    config = json.loads((out / "config.json").read_text())
    assert config["num_hidden_layers"] == 1 and len(config.get("layer_types", [None])) == 1
    for name in ("tokenizer.json", "tokenizer_config.json", "opdweb_task.json"):
        assert (out / name).read_bytes() == (Path(teacher) / name).read_bytes()

    from transformers import AutoModelForCausalLM

    ids = torch.tensor([[3, 5, 7, 9]])
    with torch.no_grad():
        student_logits = AutoModelForCausalLM.from_pretrained(str(out)).eval()(ids).logits
        teacher_logits = AutoModelForCausalLM.from_pretrained(teacher).eval()(ids).logits
    assert student_logits.shape == teacher_logits.shape and not torch.allclose(student_logits, teacher_logits)


def test_the_command_refuses_bad_input_with_one_line_and_writes_nothing(teacher, tmp_path):
    def derive(*args):
        return subprocess.run([sys.executable, "-m", "workers", "derive-student", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)

    out = tmp_path / "s"
    done = derive("--teacher", teacher, "--out", str(out), "--keep", "0,1")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: keep names all 2 layers: the student would be the teacher"]
    assert not out.exists() and not list(tmp_path.iterdir())
    done = derive("--teacher", str(tmp_path / "nowhere"), "--out", str(out))
    assert done.returncode == 2 and "is not a checkpoint folder" in done.stderr and not out.exists()
    assert derive("--teacher", teacher, "--out", str(out), "--keep", "0", "--json").returncode == 0
    assert derive("--teacher", teacher, "--out", str(out)).returncode == 2  # exists: --force to replace
    done = derive("--teacher", teacher, "--out", str(out), "--keep", "1", "--force")
    assert done.returncode == 0 and "1 of the teacher's 2 layers (1)" in done.stdout
