"""verl: Hydra overrides for its trainer command line (``python -m verl.trainer.main_ppo``),
written against the config tree of the ``verl`` wheel at :data:`VERL_VERSION` and checked
by composing them on that tree (:mod:`.verification`).

What verl builds, read from that version's source: ``rollout.quantization=fp8`` is online
block FP8 (128x128 weight blocks, dynamic activation scales: W8A8); on its vLLM path only MoE
router gates stay BF16, so a config with per-layer exceptions runs on its SGLang path, where
``SGLANG_FP8_IGNORED_LAYERS`` (``verl/utils/sglang/sglang_fp8_utils.py``, read by the server
and by the weight sync alike, set through Ray's runtime env) lists the checkpoint modules
kept BF16 (SGLang fuses q/k/v and gate/up and refuses a fused module kept in part, and has no
per-layer KV-cache exception); an FP8 KV cache
gets scale 1.0 after each weight sync unless the checkpoint ships scales; staleness needs
an asynchronous ``trainer.v1.trainer_mode`` for ``max_off_policy_threshold`` to act, counted
in global steps of ``parameter_sync_step`` mini-batch updates, with the settings its trainer
asserts at init (:data:`SEPARATE_ASYNC`); token
TIS / IcePop are ``algorithm.rollout_correction.rollout_is`` with a threshold ``C`` or
``"low_high"``, sequence masking is ``rollout_rs=seq_mean_k1`` whose bounds are on the sequence's
mean of ``-log(p_train / p_rollout)``, so the config's bounds invert (``1/high_1/low``); a correction reaches an OPD
loss only with ``distillation.distillation_loss.use_policy_gradient``."""
from __future__ import annotations

from opdweb.exports.base import (
    Provenance,
    block_fp8_refusals,
    comment_block,
    gpu_note,
    nearest_engine,
    refuse_if,
)
from opdweb.exports.quoting import hydra_value
from workers.science.checkpoint_facts import CheckpointFacts
from workers.science.config import DTYPE_LIBRARY_NAMES, RolloutConfig
from workers.science.vllm_args import (
    kept_in_bf16,
    kv_cache_refusals,
    module_name_refusals,
    nucleus_refusals,
    screening_refusals,
)

VERL_VERSION = "0.9.1"
TARGET = f"verl {VERL_VERSION}"
#: The rollout engines its wheel pins (``verl[vllm]`` / ``verl[sglang]``, the README's table of targets).
ENGINE_PIN = "vLLM 0.24.0 or SGLang 0.5.12 (its `vllm` / `sglang` extras); the engine arguments its vLLM server " \
             "passes are checked against vLLM 0.24.0's own EngineArgs and accepted values"
GPUS = ("FP8 (block W8A8): Ada (sm_89), Hopper (sm_90) and newer; on Ampere and older vLLM runs block FP8 as Marlin "
        "weight-only (read in vLLM 0.32's kernel choice, not in 0.24's); BF16: any")
ROLLOUT = "actor_rollout_ref.rollout"
CORRECTION = "algorithm.rollout_correction"
IGNORED_LAYERS = "ray_kwargs.ray_init.runtime_env.env_vars.SGLANG_FP8_IGNORED_LAYERS"
#: What ``PPOTrainerSeparateAsync.__init__`` asserts before it starts (verl 0.9.1,
#: ``trainer/ppo/v1/trainer_separate_async.py``): ``train_batch_size == parameter_sync_step *
#: ppo_mini_batch_size`` (one optimizer step per global step, at the team's mini-batch size, so
#: staleness counts the same in verl's global steps as in the config's optimizer steps), a
#: standalone rollout pool (``rollout.nnodes > 0``) and a checkpoint engine other than ``naive``.
SEPARATE_ASYNC = [
    "trainer.v1.trainer_mode=separate_async",
    "trainer.v1.separate_async.parameter_sync_step=1",
    "data.train_batch_size='${actor_rollout_ref.actor.ppo_mini_batch_size}'",
    "actor_rollout_ref.actor.ppo_epochs=1",
    f"{ROLLOUT}.nnodes=1",
    f"{ROLLOUT}.checkpoint_engine.backend=nccl",
]

#: What verl builds from each part of a rollout config (the README's table of targets).
BUILDS = {
    "weights": "`rollout.quantization=fp8`: 128x128 block FP8 E4M3, online at each weight sync",
    "activations": "always FP8 with FP8 weights: dynamic, per token and group of 128",
    "kv_cache": "`+rollout.engine_kwargs.vllm.kv_cache_dtype`; scale 1.0 after each sync unless the checkpoint "
                "ships scales",
    "keep_bf16": "on its SGLang rollout (`rollout.name=sglang`): `SGLANG_FP8_IGNORED_LAYERS` in Ray's runtime env, "
                 "checkpoint module names, fused q/k/v and gate/up whole; no per-layer KV exception; "
                 "cannot be expressed on its vLLM path",
    "staleness": "`trainer.v1.trainer_mode=separate_async` + `trainer.v1.sampler.max_off_policy_threshold` (an upper "
                 "bound, in global steps), `parameter_sync_step=1` with `train_batch_size` = `ppo_mini_batch_size` "
                 "(a global step is one optimizer step), a standalone rollout pool (`rollout.nnodes`) and the nccl "
                 "checkpoint engine, as its trainer asserts at init; 0: `sync`",
    "correction": "`algorithm.rollout_correction`: TIS `rollout_is=token` + threshold C, IcePop threshold "
                  "`'low_high'`, masking `rollout_rs=seq_mean_k1` with the bounds inverted (`'1/high_1/low'`: "
                  "verl bounds p_rollout / p_train); OPD only with `use_policy_gradient`",
    "logprobs": "`rollout.logprobs_mode=processed_logprobs`; top_p 1 (processed logprobs are renormalised over the "
                "nucleus)",
}


def _sampled_opd(method: str | None) -> bool:
    return bool(method) and method.startswith("opd:sampled")


def on_sglang(config: RolloutConfig) -> bool:
    """Whether verl rolls ``config`` out on SGLang: FP8 weights with per-layer exceptions."""
    return bool(config.keep_bf16) and config.weights != "bf16"


def sglang_refusals(config: RolloutConfig, facts: CheckpointFacts | None) -> list[str]:
    """Where verl's SGLang rollout cannot keep ``config.keep_bf16`` as admitted."""
    problems = []
    if config.sampling.temperature != 1.0:
        problems.append(f"keep_bf16 takes verl's SGLang rollout, and at temperature {config.sampling.temperature:g} "
                        "its logprobs are not checked here to be the processed (after temperature) ones the admission "
                        "check measured; admit at temperature 1")
    names = module_name_refusals(config, facts)
    if names or facts is None or not facts.n_layers:
        return problems + names
    kept, fused = kept_in_bf16(config, facts.n_layers, "SGLang")
    problems += fused
    if kept.kv_skip_layers:
        problems.append(f"keep_bf16 keeps the KV cache of layers {', '.join(kept.kv_skip_layers)} in BF16: SGLang "
                        "has no per-layer KV-cache exception; keep modules only (e.g. model.layers.0.mlp.*)")
    return problems


def refusals(config: RolloutConfig, facts: CheckpointFacts | None, method: str | None = None) -> list[str]:
    """Where verl would run another rollout engine or correction than ``config``'s."""
    problems = screening_refusals(config) + block_fp8_refusals(config, "verl's rollout.quantization=fp8")
    if on_sglang(config):
        problems += sglang_refusals(config, facts)
    engine = "verl's SGLang" if on_sglang(config) else "verl's vLLM (after each weight sync)"
    problems += kv_cache_refusals(config, facts, engine)
    problems += nucleus_refusals(config, f"verl's {'SGLang' if on_sglang(config) else 'vLLM'} rollout")
    if config.kv_cache != "none" and config.keep_bf16 and config.weights == "bf16":
        problems.append("keep_bf16 with an FP8 KV cache: not written for verl yet; admit without keep_bf16")
    if config.correction.kind != "none" and method and method.startswith("opd") and not _sampled_opd(method):
        problems.append(f"correction {config.correction.kind} with {method}: verl applies a rollout correction to "
                        "its distillation loss only as a policy gradient (use_policy_gradient), the sampled-token "
                        "OPD loss; calibrate the budget with the sampled loss")
    return problems


def nearest(config: RolloutConfig) -> dict:
    """The nearest engine verl builds: block W8A8 FP8, KV scales 1.0, top_p 1, per-layer
    exceptions (on SGLang) at temperature 1."""
    changes: dict = {"sampling": {"top_p": 1.0}}
    if on_sglang(config):
        changes["sampling"]["temperature"] = 1.0
        if config.kv_cache != "none":  # a whole layer kept: its modules only, SGLang quantizes every KV cache
            changes["keep_bf16"] = [item for entry in config.keep_bf16 for item in (
                [f"model.layers.{entry}.self_attn.*_proj", f"model.layers.{entry}.mlp.*"] if isinstance(entry, int)
                else [entry])]
    return nearest_engine(config, "verl", fp8="block", keeps_layers=True, **changes)


def _correction(config: RolloutConfig) -> list[str]:
    c = config.correction
    if c.kind == "tis":
        return [f"{CORRECTION}.rollout_is=token", f"{CORRECTION}.rollout_is_threshold={c.cap!r}"]
    if c.kind == "icepop":
        return [f"{CORRECTION}.rollout_is=token", f"{CORRECTION}.rollout_is_threshold='{c.low!r}_{c.high!r}'"]
    if c.kind == "mask":
        # verl bounds the sequence mean of -log(p_train / p_rollout): the inverse ratio, so the bounds invert
        return [f"{CORRECTION}.rollout_rs=seq_mean_k1",
                f"{CORRECTION}.rollout_rs_threshold='{1 / c.high!r}_{1 / c.low!r}'"]
    return [f"{CORRECTION}.rollout_is=null", f"{CORRECTION}.rollout_rs=null"]


def verl_overrides(config: RolloutConfig, provenance: Provenance, facts: CheckpointFacts) -> str:
    """Hydra overrides for verl's trainer command line, one per line; refused
    (NotExpressible) where verl would build another engine."""
    refuse_if(TARGET, refusals(config, facts, provenance.method))
    sampling = config.sampling
    notes = ["verl seeds each rollout replica with rollout.seed + its rank",
             *gpu_note(config, "vLLM runs block FP8 as Marlin weight-only (FP8 weights, BF16 activations)")]
    engine = "sglang" if on_sglang(config) else "vllm"
    lines = [
        f"actor_rollout_ref.model.path={hydra_value(provenance.checkpoint)}",
        f"{ROLLOUT}.name={engine}",
        f"{ROLLOUT}.dtype={DTYPE_LIBRARY_NAMES[config.dtype]}",
        f"{ROLLOUT}.seed={config.seed}",
        f"{ROLLOUT}.logprobs_mode=processed_logprobs",
        f"{ROLLOUT}.calculate_log_probs=True",
    ]
    if config.weights == "fp8_e4m3":
        lines.append(f"{ROLLOUT}.quantization=fp8")
    if on_sglang(config):
        kept = kept_in_bf16(config, facts.n_layers or 0, "SGLang")[0]
        lines.append(f"+{IGNORED_LAYERS}={hydra_value(','.join(kept.unfused))}")
        notes.append(f"keep_bf16 runs on verl's SGLang rollout: {IGNORED_LAYERS.rsplit('.', 1)[1]} reaches the "
                     "SGLang server and the weight sync through Ray's runtime env")
    if config.kv_cache != "none":
        lines.append(f"+{ROLLOUT}.engine_kwargs.{engine}.kv_cache_dtype={config.kv_cache}")
    lines += [
        f"{ROLLOUT}.temperature={sampling.temperature!r}",
        f"{ROLLOUT}.top_p={sampling.top_p!r}",
        f"data.max_response_length={sampling.max_new_tokens}",
    ]
    if config.staleness > 0:
        lines += [*SEPARATE_ASYNC, f"trainer.v1.sampler.max_off_policy_threshold={config.staleness}"]
        notes += [f"staleness k = {config.staleness} optimizer steps = {config.staleness} global steps at these batch "
                  "settings (verl counts max_off_policy_threshold in global steps of parameter_sync_step mini-batch "
                  "updates; parameter_sync_step 1 with data.train_batch_size = ppo_mini_batch_size and ppo_epochs 1 "
                  "makes a global step one optimizer step)",
                  f"max_off_policy_threshold {config.staleness} is an upper bound on the model versions a "
                  "trajectory spans; the admission check measured the oldest",
                  "separate_async rolls out on a standalone pool: set actor_rollout_ref.rollout.nnodes and "
                  "n_gpus_per_node to it; weights reach it through the nccl checkpoint engine (verl refuses naive "
                  "there)"]
    else:
        lines.append("trainer.v1.trainer_mode=sync")
    lines += _correction(config)
    if provenance.method and provenance.method.startswith("opd"):
        gradient = "true" if _sampled_opd(provenance.method) else "false"
        lines += ["distillation.enabled=true", f"distillation.distillation_loss.use_policy_gradient={gradient}"]
        notes.append("set the teacher: distillation.teacher_models.teacher_model.model_path (and key, num_replicas)")
    return "\n".join(comment_block(provenance, TARGET, notes) + lines) + "\n"
