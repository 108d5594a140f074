import json

from workers.science.toy import EOS_ID, build_toy_models, encode


def test_toy_checkpoints_are_ordinary_hf_checkpoints(student, teacher):
    from transformers import AutoConfig, AutoTokenizer

    for d in (student, teacher):
        tok = AutoTokenizer.from_pretrained(d)
        ids = tok("12+34=").input_ids
        assert ids == encode("12+34=")
        assert tok.decode(ids) == "12+34="
        assert tok.eos_token_id == EOS_ID
        conf = AutoConfig.from_pretrained(d)
        assert conf.model_type == "qwen2" and conf.hidden_size // conf.num_attention_heads == 64


def test_teacher_is_larger_and_better_than_student(toy_manifest):
    assert toy_manifest["teacher_params"] > toy_manifest["student_params"]
    assert toy_manifest["teacher_accuracy"] > toy_manifest["student_accuracy"]


def test_student_has_a_snapshot_ring(student):
    from pathlib import Path

    index = json.loads((Path(student) / "snapshots" / "index.json").read_text())
    assert len(index["steps"]) == 8 and index["steps"] == sorted(index["steps"])


def test_a_second_build_is_cached(toy_dir):
    again = build_toy_models("test", toy_dir)
    assert again["cached"] is True
