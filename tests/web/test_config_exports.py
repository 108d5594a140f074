"""The export mappings, pure functions of a canonical config: each checked against text
written out by hand from the tools' documented key spellings (../shared/REFERENCE.md §4-5)."""
import json

import yaml

from opdweb.exports import FORMATS, Provenance
from opdweb.rollouts.canonical import canonical_rollout

PROVENANCE = Provenance(config_hash="ab" * 32, config_name="fp8 w+kv", checkpoint="/models/student",
                        approval_id=7, approved_by="bob", approved_at="2026-11-30T12:00:00+00:00",
                        admission_job_id=42, verdict="pass", multiple=3.5)
HEADER = ("# opdweb rollout config " + "ab" * 32 + " (fp8 w+kv) for /models/student; approval #7 by bob at "
          "2026-11-30T12:00:00+00:00; admission check #42: 3.5x BF16, pass")


def render(fmt, partial):
    return FORMATS[fmt].render(canonical_rollout(partial), PROVENANCE)


def test_it_writes_verl_overrides_for_fp8_weights_and_kv_asynchronous():
    text = render("verl", {"weights": "fp8_e4m3", "kv_cache": "fp8_e4m3", "staleness": 2})
    assert text == "\n".join([
        HEADER,
        "actor_rollout_ref.model.path=/models/student",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.dtype=bfloat16",
        "actor_rollout_ref.rollout.quantization=fp8",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype=fp8",
        "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.top_p=1.0",
        "data.max_response_length=64",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        "algorithm.rollout_correction.rollout_is=token",
        "algorithm.rollout_correction.rollout_is_threshold=2.0",
        "trainer.v1.sampler.max_off_policy_threshold=2",
    ]) + "\n"


def test_it_writes_verl_overrides_for_bf16_without_quantization_keys():
    text = render("verl", {"sampling": {"temperature": 0.7, "max_new_tokens": 512}})
    lines = text.splitlines()
    assert "actor_rollout_ref.rollout.quantization=fp8" not in lines
    assert not any("kv_cache_dtype" in line or "max_off_policy" in line for line in lines)
    assert "actor_rollout_ref.rollout.temperature=0.7" in lines
    assert "data.max_response_length=512" in lines


def test_it_writes_vllm_engine_arguments_with_ignored_layers():
    text = render("vllm",
                  {"weights": "fp8_e4m3", "kv_cache": "fp8_e4m3", "keep_bf16": [0, "model.layers.*.mlp.down_proj"],
                           "seed": 5})
    doc = json.loads(text)
    assert doc["engine_args"] == {
        "model": "/models/student",
        "dtype": "bfloat16",
        "quantization": "fp8",
        "hf_overrides": {"quantization_config": {
            "quant_method": "fp8", "activation_scheme": "dynamic",
            "ignored_layers": ["model.layers.0.*", "model.layers.*.mlp.down_proj"]}},
        "kv_cache_dtype": "fp8_e4m3",
        "calculate_kv_scales": True,
        "kv_cache_dtype_skip_layers": ["0"],
        "seed": 5,
    }
    assert doc["sampling_params"] == {"temperature": 1.0, "top_p": 1.0, "max_tokens": 64, "ignore_eos": False,
                                      "logprobs": 0}
    assert doc["opdweb"]["config_hash"] == "ab" * 32
    assert doc["opdweb"]["admission_job_id"] == 42 and doc["opdweb"]["approved_by"] == "bob"
    assert doc["opdweb"]["notes"] == []


def test_it_says_what_vllm_online_fp8_cannot_express():
    doc = json.loads(render("vllm", {"weights": "fp8_e4m3", "weight_scale": "channel", "noise_sigma": 0.1}))
    assert doc["engine_args"]["kv_cache_dtype"] == "auto"
    assert doc["opdweb"]["notes"] == [
        "per-channel FP8 weight scales: online FP8 quantization uses per-tensor scales; "
        "load a checkpoint quantized with per-channel scales (llm-compressor)",
        "noise_sigma 0.1 is a screening perturbation, not an engine setting; it is not exported",
    ]


def test_it_writes_prime_rl_toml():
    text = render("prime-rl", {"weights": "fp8_e4m3", "staleness": 1, "dtype": "bfloat16"})
    assert text == "\n".join([
        HEADER,
        "",
        "[orchestrator]",
        "max_off_policy_steps = 1",
        "",
        "[orchestrator.sampling]",
        "temperature = 1.0",
        "max_tokens = 64",
        "",
        "[inference.model]",
        'name = "/models/student"',
        'dtype = "bfloat16"',
        "",
        "[inference.vllm]",
        'quantization = "fp8"',
        'kv_cache_dtype = "auto"',
    ]) + "\n"


def test_it_writes_slime_flags():
    text = render("slime", {"kv_cache": "fp8_e4m3"})
    assert text == "\n".join([
        HEADER,
        "--hf-checkpoint /models/student \\",
        "--sglang-kv-cache-dtype fp8_e4m3 \\",
        "--rollout-temperature 1.0 \\",
        "--rollout-top-p 1.0 \\",
        "--rollout-max-response-len 64 \\",
        "--use-tis \\",
        "--tis-clip 2.0",
    ]) + "\n"


def test_it_writes_plain_yaml_that_reads_back_as_the_config():
    config = canonical_rollout({"weights": "fp8_e4m3", "kv_cache": "fp8_e4m3"})
    doc = yaml.safe_load(FORMATS["yaml"].render(config, PROVENANCE))
    assert doc["rollout"] == config
    assert doc["rollout"]["weights"] == "fp8_e4m3" and doc["rollout"]["noise_sigma"] == 0.0
    assert doc["opdweb"]["config_hash"] == "ab" * 32 and doc["opdweb"]["approval_id"] == 7
