import pytest
import torch

from workers.science.config import ConfigError, RolloutConfig, SamplingConfig
from workers.science.engines.hf import HFEngine, resolve_keep_bf16
from workers.science.metrics import TokenRecords, metric_values, summarize
from workers.science.prompts import arithmetic_prompt_set
from workers.science.toy import EOS_ID, PAD_ID, encode

SAMPLING = SamplingConfig(temperature=1.0, max_new_tokens=8)


@pytest.fixture(scope="module")
def prompts():
    return [encode(p.prompt) for p in arithmetic_prompt_set(48, level=1, seed=3)]


@pytest.fixture(scope="module")
def trainer(student):
    return HFEngine.trainer(student, "fp32", "cpu")


def test_sampled_logprobs_match_teacher_forced_scoring_in_fp32(trainer, prompts):
    r = trainer.sample(prompts, SAMPLING, seed=0)
    s = trainer.score(prompts, r.tokens, r.mask)
    assert torch.allclose(r.logprobs, s.logprobs, atol=1e-4)
    assert r.mask.sum() > len(prompts)


def test_responses_stop_after_eos_and_are_masked(trainer, prompts):
    r = trainer.sample(prompts, SAMPLING, seed=0)
    for row, m in zip(r.tokens, r.mask, strict=True):
        n = int(m.sum())
        assert bool(m[:n].all()) and not bool(m[n:].any())  # mask is a prefix
        if EOS_ID in row[:n].tolist():
            assert row[n - 1] == EOS_ID
        assert bool((row[n:] == PAD_ID).all())


def test_same_seed_same_tokens_different_seed_different_tokens(trainer, prompts):
    a = trainer.sample(prompts, SAMPLING, seed=5)
    b = trainer.sample(prompts, SAMPLING, seed=5)
    c = trainer.sample(prompts, SAMPLING, seed=6)
    assert torch.equal(a.tokens, b.tokens)
    assert not torch.equal(a.tokens, c.tokens)


def test_greedy_is_the_argmax(trainer, prompts):
    r = trainer.sample(prompts, SamplingConfig(temperature=0.0, max_new_tokens=8), seed=0, return_full=True)
    first = r.full_logprobs[:, 0, :].argmax(-1)
    assert torch.equal(r.tokens[:, 0], first)


def test_top_p_only_samples_the_nucleus(trainer, prompts):
    r = trainer.sample(prompts, SamplingConfig(temperature=1.0, top_p=0.3, max_new_tokens=1), seed=0, return_full=True)
    p = r.full_logprobs[:, 0, :].exp()
    sorted_p, order = p.sort(-1, descending=True)
    for i, tok in enumerate(r.tokens[:, 0].tolist()):
        rank = (order[i] == tok).nonzero().item()
        assert sorted_p[i, :rank].sum() < 0.3 + 1e-6


def test_bf16_engine_differs_a_little_from_fp32(student, trainer, prompts):
    eng = HFEngine(student, RolloutConfig(dtype="bf16"), "cpu")
    r = eng.sample(prompts, SAMPLING, seed=0)
    s = trainer.score(prompts, r.tokens, r.mask)
    k3 = metric_values(summarize(TokenRecords.from_arrays(r.logprobs, s.logprobs, r.mask)))["k3"]
    assert 0 < k3 < 1e-3


def rollout_logprobs(student, cfg, prompts):
    return HFEngine(student, cfg, "cpu").sample(prompts, SAMPLING, seed=0)


def test_staleness_zero_equals_the_reference(student, prompts):
    ref = rollout_logprobs(student, RolloutConfig(), prompts)
    st0 = rollout_logprobs(student, RolloutConfig(staleness=0), prompts)
    st2 = rollout_logprobs(student, RolloutConfig(staleness=2), prompts)
    assert torch.equal(ref.tokens, st0.tokens) and torch.equal(ref.logprobs, st0.logprobs)
    assert not torch.equal(ref.logprobs, st2.logprobs)


def test_keeping_every_layer_in_bf16_recovers_the_bf16_engine(student, prompts):
    ref = rollout_logprobs(student, RolloutConfig(), prompts)
    cfg = RolloutConfig(weights="fp8_e4m3", kv_cache="fp8_e4m3", noise_sigma=0.2, keep_bf16=[0])
    kept = rollout_logprobs(student, cfg, prompts)
    assert torch.equal(ref.tokens, kept.tokens) and torch.equal(ref.logprobs, kept.logprobs)
    by_glob = rollout_logprobs(student, cfg.model_copy(update={"keep_bf16": ["model.layers.*"]}), prompts)
    assert torch.equal(ref.logprobs, by_glob.logprobs)
    quantized = rollout_logprobs(student, cfg.model_copy(update={"keep_bf16": []}), prompts)
    assert not torch.equal(ref.logprobs, quantized.logprobs)


def test_fp8_kv_cache_changes_logprobs_and_per_head_is_supported(student, prompts):
    ref = rollout_logprobs(student, RolloutConfig(), prompts)
    for gran in ("tensor", "head"):
        kv = rollout_logprobs(student, RolloutConfig(kv_cache="fp8_e4m3", kv_scale=gran), prompts)
        assert not torch.equal(ref.logprobs, kv.logprobs)


def test_keep_bf16_resolution_and_errors():
    names = [f"model.layers.{i}.{m}" for i in range(2) for m in ("self_attn.q_proj", "mlp.up_proj")]
    assert resolve_keep_bf16([1], names, 2) == {
        "model.layers.1.self_attn.q_proj", "model.layers.1.mlp.up_proj", "model.layers.1.self_attn.kv_cache"}
    assert resolve_keep_bf16(["*.mlp.*"], names, 2) == {"model.layers.0.mlp.up_proj", "model.layers.1.mlp.up_proj"}
    assert resolve_keep_bf16(["re:layers\\.0\\..*q_proj"], names, 2) == {"model.layers.0.self_attn.q_proj"}
    with pytest.raises(ConfigError, match="out of range: the model has 2 layers"):
        resolve_keep_bf16([2], names, 2)
    with pytest.raises(ConfigError, match="matches no module"):
        resolve_keep_bf16(["*.attention.*"], names, 2)


def test_bad_configs_fail_when_the_engine_is_built(student, tmp_path):
    with pytest.raises(ConfigError, match="out of range"):
        HFEngine(student, RolloutConfig(weights="fp8_e4m3", keep_bf16=[5]), "cpu")
    with pytest.raises(ConfigError, match="block_size 48 does not divide"):
        HFEngine(student, RolloutConfig(weights="fp8_e4m3", weight_scale="block", block_size=48), "cpu")
    with pytest.raises(ConfigError, match="beyond the snapshot ring"):
        HFEngine(student, RolloutConfig(staleness=50), "cpu")
    with pytest.raises(ConfigError, match="does not exist"):
        HFEngine(str(tmp_path / "missing"), RolloutConfig(), "cpu")


def test_staleness_without_snapshots_is_refused(teacher):
    with pytest.raises(ConfigError, match="no snapshots/index.json"):
        HFEngine(teacher, RolloutConfig(staleness=1), "cpu")


def test_w8a8_uses_emulation_on_cpu_and_scaled_mm_when_forced(student, prompts):
    emu = HFEngine(student, RolloutConfig(weights="fp8_e4m3", activations="fp8_e4m3"), "cpu")
    assert emu.prepared.fp8_backend == "emulated"
    real = HFEngine(student, RolloutConfig(weights="fp8_e4m3", activations="fp8_e4m3", fp8_matmul="scaled_mm"), "cpu")
    assert real.prepared.fp8_backend == "scaled_mm"
    a = emu.sample(prompts, SAMPLING, seed=0)
    b = real.sample(prompts, SAMPLING, seed=0)
    # common random numbers: the two backends' first tokens agree almost everywhere ...
    same = (a.tokens[:, 0] == b.tokens[:, 0])
    assert float(same.float().mean()) >= 0.9
    assert torch.allclose(a.logprobs[same, 0], b.logprobs[same, 0], atol=0.05)
    # ... and teacher-forced on the very same tokens, every token's logprob agrees
    s_emu = emu.score(prompts, a.tokens, a.mask)
    s_real = real.score(prompts, a.tokens, a.mask)
    assert int(a.mask.sum()) > len(prompts)
    assert torch.allclose(s_emu.logprobs, s_real.logprobs, atol=0.05)


def test_a_module_gets_the_same_noise_whatever_else_is_kept(teacher):
    from workers.science.engines.hf import prepare_rollout_model

    full = prepare_rollout_model(teacher, RolloutConfig(noise_sigma=0.1, dtype="fp32"), torch.device("cpu")).model
    one = prepare_rollout_model(teacher, RolloutConfig(noise_sigma=0.1, dtype="fp32", keep_bf16=[0]),
                                torch.device("cpu")).model
    base = prepare_rollout_model(teacher, RolloutConfig(dtype="fp32"), torch.device("cpu")).model
    name = "model.layers.1.mlp.down_proj"
    w_full, w_one, w0 = (dict(m.named_modules())[name].weight for m in (full, one, base))
    assert torch.equal(w_full, w_one) and not torch.equal(w_full, w0)
    kept = "model.layers.0.mlp.down_proj"
    assert torch.equal(dict(one.named_modules())[kept].weight, dict(base.named_modules())[kept].weight)


def test_both_engines_share_one_seed_rule_and_one_eos_pad_rule():
    from types import SimpleNamespace

    from workers.science.engines.base import SEED_MODULUS, sequence_seed, special_token_ids

    assert sequence_seed(5, 3) == 5 * 1_000_003 + 3  # small seeds: the formula itself
    assert 0 <= sequence_seed(2**31 - 1, 10**6) < SEED_MODULUS <= 2**31 - 1  # inside vLLM's seed range
    assert special_token_ids(SimpleNamespace(eos_token_id=[7, 9], pad_token_id=None)) == (7, 7)
    assert special_token_ids(SimpleNamespace(eos_token_id=2, pad_token_id=0)) == (2, 0)
    assert special_token_ids(SimpleNamespace()) == (None, 0)
