"""Finding 2: FP8 KV results must not depend on the batch they are measured in."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from workers.science.config import MismatchJobConfig, RolloutConfig, SamplingConfig
from workers.science.engines.hf import HFEngine, load_model
from workers.science.engines.hf.kv_scales import _MEMO, STORE_DIR_BESIDE_CHECKPOINT, calibrate_kv_amax
from workers.science.mismatch import run_mismatch
from workers.science.prompts import arithmetic_prompt_set
from workers.science.toy import EOS_ID, PAD_ID, encode

SAMPLING = SamplingConfig(temperature=1.0, max_new_tokens=8)
FP8_KV = RolloutConfig(kv_cache="fp8_e4m3")


@pytest.fixture
def student_copy(student, tmp_path):
    """A private copy of the student, so stored calibrations start from nothing."""
    _MEMO.clear()
    dst = tmp_path / "student"
    shutil.copytree(student, dst, ignore=shutil.ignore_patterns(STORE_DIR_BESIDE_CHECKPOINT))
    return str(dst)


def per_token_logprobs(engine, prompts, bs):
    out = torch.zeros(len(prompts), SAMPLING.max_new_tokens)
    for s in range(0, len(prompts), bs):
        r = engine.sample(prompts[s : s + bs], SAMPLING, seed=0, offset=s)
        out[s : s + bs, : r.logprobs.shape[1]] = r.logprobs * r.mask
    return out


@pytest.mark.parametrize("granularity", ["tensor", "head"])
def test_fp8_kv_logprobs_are_identical_at_batch_sizes_1_16_64(student, granularity):
    prompts = [encode(p.prompt) for p in arithmetic_prompt_set(64, level=1, seed=3)]
    eng = HFEngine(student, RolloutConfig(kv_cache="fp8_e4m3", kv_scale=granularity), "cpu")
    ref = HFEngine(student, RolloutConfig(), "cpu")
    lp = {bs: per_token_logprobs(eng, prompts, bs) for bs in (1, 16, 64)}
    assert torch.equal(lp[1], lp[16]) and torch.equal(lp[1], lp[64])
    assert not torch.equal(lp[1], per_token_logprobs(ref, prompts, 64))  # and FP8 KV did something


def test_the_multiple_is_the_same_at_every_batch_size(student):
    def multiple(bs):
        job = MismatchJobConfig(model=student, rollout=FP8_KV, prompts=64, batch_size=bs, device="cpu",
                                reference_engine="hf", target_ci=0, bootstrap=100)
        return run_mismatch(job).model_dump(mode="json")

    runs = {bs: multiple(bs) for bs in (1, 16, 64)}
    # the rollout side is bitwise the same; the fp32 trainer's scores may differ in the last bit across batch shapes
    assert runs[1]["value"] == pytest.approx(runs[16]["value"], rel=1e-5)
    assert runs[1]["value"] == pytest.approx(runs[64]["value"], rel=1e-5)
    assert runs[1]["multiple"] == pytest.approx(runs[64]["multiple"], rel=1e-4)
    assert runs[64]["engine"]["kv_scales"]["source"] in {"calibrated", "stored calibration"}


def test_scales_are_calibrated_once_stored_beside_the_checkpoint_and_reused(student_copy, monkeypatch):
    from workers.science.engines.hf import kv_scales

    first = HFEngine(student_copy, FP8_KV, "cpu")
    assert first.kv_amax.source == "calibrated"
    stored = list((kv_scales.Path(student_copy) / STORE_DIR_BESIDE_CHECKPOINT).glob("kv-amax-*.json"))
    assert len(stored) == 1 and first.kv_amax.path == str(stored[0])
    _MEMO.clear()
    monkeypatch.setattr(kv_scales, "calibrate_kv_amax", lambda *a, **k: pytest.fail("calibrated again"))
    second = HFEngine(student_copy, FP8_KV, "cpu")
    assert second.kv_amax.source == "stored calibration" and second.kv_amax.keys == first.kv_amax.keys


def test_a_product_cache_dir_is_preferred(student_copy, tmp_path):
    eng = HFEngine(student_copy, FP8_KV, "cpu", cache_dir=str(tmp_path / "cache"))
    assert eng.kv_amax.path.startswith(str(tmp_path / "cache"))


def test_calibration_excludes_padding(student):
    """Prompts of different lengths in one batch give the amax of each prompt decoded alone."""
    model = load_model(student, torch.device("cpu")).to(torch.bfloat16)
    prompts = [encode("1+2="), encode("3+4="), encode("5=")]  # the last is shorter: left padding
    together = calibrate_kv_amax(model, prompts, EOS_ID, PAD_ID, new_tokens=4)
    alone = [calibrate_kv_amax(model, [p], EOS_ID, PAD_ID, new_tokens=4) for p in prompts]
    for which in (0, 1):  # keys, values
        for layer in range(len(together[which])):
            expected = [max(a[which][layer][h] for a in alone) for h in range(len(together[which][layer]))]
            assert together[which][layer] == pytest.approx(expected, rel=1e-2)


def test_scales_in_the_checkpoint_are_read(student_copy):
    from safetensors.torch import load_file, save_file

    path = f"{student_copy}/model.safetensors"
    state = load_file(path)
    state["model.layers.0.self_attn.k_scale"] = torch.tensor(0.01)
    state["model.layers.0.self_attn.v_scale"] = torch.tensor(0.02)
    save_file(state, path, metadata={"format": "pt"})
    eng = HFEngine(student_copy, FP8_KV, "cpu")
    assert eng.kv_amax.source == "checkpoint"
    ks, vs = eng.kv_amax.scales(0, "fp8_e4m3", "tensor")
    assert float(ks) == pytest.approx(0.01) and float(vs) == pytest.approx(0.02)
    assert json.dumps(eng.info()["kv_scales"])


def test_the_scale_file_carries_exactly_the_scales_the_check_ran(student_copy):
    """The admission check's per-layer scales (the maximum over KV heads of the calibrated
    amax, over 448) written as the deployable file and read back as the checkpoint's own
    scales give the same engine."""
    from workers.science.kv_scale_artifact import FILE_NAME, build_artifact, read_artifact

    calibrated = HFEngine(student_copy, FP8_KV, "cpu")
    info = calibrated.info()["kv_scales"]
    assert info["source"] == "calibrated"
    amax = calibrated.kv_amax
    by_hand = {"k": [max(row) / 448.0 for row in amax.keys], "v": [max(row) / 448.0 for row in amax.values]}
    assert info["per_layer"]["format"] == "fp8_e4m3"
    for kv in ("k", "v"):
        assert info["per_layer"][kv] == pytest.approx(by_hand[kv], rel=1e-6)
        assert all(s != 1.0 for s in info["per_layer"][kv])
    artifact = build_artifact(calibrated.info(), "c0ffee")
    assert artifact == build_artifact(calibrated.info(), "c0ffee")  # the same scales, the same bytes and hash
    assert read_artifact(artifact.data) == {"k": info["per_layer"]["k"], "v": info["per_layer"]["v"]}  # float32-exact

    (Path(student_copy) / FILE_NAME).write_bytes(artifact.data)
    _MEMO.clear()
    shutil.rmtree(Path(student_copy) / STORE_DIR_BESIDE_CHECKPOINT)  # only the file can supply them now
    from_file = HFEngine(student_copy, FP8_KV, "cpu")
    assert from_file.kv_amax.source == "checkpoint"
    for kv in ("k", "v"):
        assert from_file.info()["kv_scales"]["per_layer"][kv] == pytest.approx(info["per_layer"][kv], rel=1e-6)
    prompts = [encode(f"{a}+{b}=") for a in range(4) for b in range(4)]
    assert torch.allclose(per_token_logprobs(from_file, prompts, 16), per_token_logprobs(calibrated, prompts, 16),
                          atol=1e-5)


def test_the_scale_file_is_a_safetensors_file_to_the_safetensors_library(tmp_path):
    """Written by hand (the web process has no numpy): safetensors itself and torch read it."""
    from safetensors import safe_open

    from workers.science.kv_scale_artifact import build_artifact, read_artifact

    per_layer = {"format": "fp8_e4m3", "k": [0.1, 0.3], "v": [0.2, 7.0]}
    info = {"kv_scales": {"source": "calibrated", "per_layer": per_layer}}
    artifact = build_artifact(info, "c0ffee")
    path = tmp_path / artifact.file_name
    path.write_bytes(artifact.data)
    with safe_open(str(path), "pt") as f:
        got = {name: f.get_tensor(name) for name in f.keys()}
        assert json.loads(f.metadata()["opdweb"]) == {"checkpoint_hash": "c0ffee", "format": "fp8_e4m3",
                                                      "source": "calibrated"}
    assert all(t.dtype == torch.float32 and t.shape == () for t in got.values())
    assert float(got["model.layers.1.self_attn.k_scale"]) == float(torch.tensor(0.3))
    assert float(got["model.layers.1.self_attn.v_scale"]) == 7.0
    assert read_artifact(artifact.data) == {"k": [float(torch.tensor(0.1)), float(torch.tensor(0.3))],
                                            "v": [float(torch.tensor(0.2)), 7.0]}


def gsm8k_lines(questions):
    return "".join(json.dumps({"question": q, "answer": "#### 1"}) + "\n" for q in questions)


def test_a_jsonl_task_calibrates_on_its_own_split_never_on_the_measured_prompts(student, tmp_path):
    from workers.science.config import ConfigError
    from workers.science.engines.hf.kv_scales import calibration_prompt_ids
    from workers.science.engines.hf.loading import load_tokenizer

    task = tmp_path / "probe.jsonl"
    task.write_text(gsm8k_lines(["1+1?", "2+2?", "3+3?"]))
    tokenizer = load_tokenizer(student)
    with pytest.raises(ConfigError, match=r"need a calibration split .* put probe\.calibration\.jsonl beside it"):
        calibration_prompt_ids(student, tokenizer, str(task))
    (tmp_path / "probe.calibration.jsonl").write_text(gsm8k_lines(["4+4?", "5+5?"]))
    ids = calibration_prompt_ids(student, tokenizer, str(task))
    assert ids == [list(tokenizer(q, add_special_tokens=True).input_ids) for q in ("4+4?", "5+5?")]
    # A split that links out of the task's folder is refused (the folder is what the sandbox admitted).
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.jsonl").write_text(gsm8k_lines(["9+9?"]))
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "probe.jsonl").write_text(gsm8k_lines(["1+1?"]))
    (linked / "probe.calibration.jsonl").symlink_to(elsewhere / "secret.jsonl")
    with pytest.raises(ConfigError, match="leads out of the task's folder"):
        calibration_prompt_ids(student, tokenizer, str(linked / "probe.jsonl"))
