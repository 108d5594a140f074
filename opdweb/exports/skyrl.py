"""SkyRL: the rollout part of its trainer's command line, one ``key=value`` override per line
(``python -m skyrl.train.entrypoints.main_base`` reads them with
``SkyRLTrainConfig.from_cli_overrides``), written against SkyRL 0.3.0's source.

SkyRL starts vLLM (0.23.0, its ``fsdp`` / ``megatron`` extras) from its own arguments and
then sets every ``generator.inference_engine.engine_init_kwargs`` entry on vLLM's engine
arguments, so the engine part is the product's own vLLM mapping; vLLM keeps only the names
its ``EngineArgs`` has, which is why each is checked against 0.23.0's source
(:mod:`.pinned_vllm`).  Its off-policy correction bounds ``exp(old - rollout)``, the
trainer's probability over the engine's: the config's own ratio, so the bounds are written as
they stand."""
from __future__ import annotations

from dataclasses import replace

from opdweb.exports import vllm
from opdweb.exports.base import Provenance, comment_block, gpu_note, nearest_engine, refuse_if
from opdweb.exports.quoting import omegaconf_cli_list, omegaconf_cli_value
from opdweb.exports.skyrl_source import VERSION
from workers.science.checkpoint_facts import CheckpointFacts
from workers.science.config import DTYPE_LIBRARY_NAMES, RolloutConfig
from workers.science.vllm_args import vllm_engine_args, vllm_refusals

TARGET = f"SkyRL {VERSION}"
VLLM_PIN = "0.23.0"
#: The rollout engine its wheel pins (the README's table of targets).
ENGINE_PIN = (f"vLLM {VLLM_PIN} (its `fsdp` / `megatron` extras); `engine_init_kwargs` are checked against vLLM "
              f"{VLLM_PIN}'s own EngineArgs and accepted values")
GPUS = "as vLLM"
ENGINE = "generator.inference_engine"
CORRECTION = "trainer.algorithm.off_policy_correction"

#: What SkyRL builds from each part of a rollout config (the README's table of targets).
BUILDS = {
    "weights": "as vLLM 0.23 (`engine_init_kwargs` set on its engine arguments): `fp8_per_tensor` only, no "
               "`fp8_per_channel`",
    "activations": "as vLLM",
    "kv_cache": "as vLLM, but no scale file ships with it: scales from the checkpoint, else 1.0",
    "keep_bf16": "as vLLM (`engine_init_kwargs.quantization_config.ignore`)",
    "staleness": "0 only (its synchronous trainer): its fully async trainer trains only on `rollout_is` or `dppo`, "
                 "losses that also mask tokens by their ratio",
    "correction": "TIS `off_policy_correction.tis_ratio_type=token` + `token_tis_ratio_clip_high`; IcePop "
                  "`token_mask_is_threshold_low` / `_high`; sequence masking `sequence_mask_metric=geometric` + "
                  "`geo_mask_low` / `_high`",
    "logprobs": "`engine_init_kwargs.logprobs_mode=processed_logprobs`; top_p 1 (as vLLM)",
}


def refusals(config: RolloutConfig, facts: CheckpointFacts | None, method: str | None = None) -> list[str]:
    """Where SkyRL would run another rollout engine or loss than ``config``'s."""
    # the calibrated-KV scale file is the vLLM engine export's; this export does not ship it
    problems = vllm_refusals(config, replace(facts, shipped_kv_scales=False) if facts else None)
    if config.weights == "fp8_e4m3" and config.weight_scale == "channel":
        problems.append(f"weight_scale channel: vLLM {VLLM_PIN}, which SkyRL pins, has no fp8_per_channel online "
                        "quantization (0.26 added it); admit per-tensor W8A8")
    if config.staleness:
        problems.append(f"staleness {config.staleness}: SkyRL's fully async trainer (trainer.fully_async) asserts a "
                        "policy loss on rollout logprobs, rollout_is or dppo, and both mask tokens whose "
                        "p_train / p_rollout leaves 1 ± 0.2 (rollout_is) or a probability band (dppo): a correction "
                        "the admission check did not apply; admit staleness 0 for its synchronous trainer")
    return problems


def nearest(config: RolloutConfig) -> dict:
    """The nearest engine SkyRL runs: vLLM's with per-tensor FP8 weights, top_p 1, synchronous."""
    changes: dict = {"weight_scale": "tensor"} if config.weights == "fp8_e4m3" else {}
    return nearest_engine(config, "skyrl", fp8="tensor", keeps_layers=True, sampling={"top_p": 1.0}, staleness=0,
                          **changes)


def _value(value) -> str:
    """A Python value as an OmegaConf command-line value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return omegaconf_cli_value(value)
    if isinstance(value, list) and all(isinstance(v, (str, int)) for v in value):
        return omegaconf_cli_list(value)
    raise TypeError(f"no OmegaConf command-line form for {value!r}")


def _leaves(prefix: str, value):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(f"{prefix}.{key}", inner)
    else:
        yield prefix, value


def _correction(config: RolloutConfig) -> list[tuple[str, object]]:
    c = config.correction
    if c.kind == "tis":
        return [("tis_ratio_type", "token"), ("token_tis_ratio_clip_high", c.cap)]
    if c.kind == "icepop":
        return [("token_mask_is_threshold_low", c.low), ("token_mask_is_threshold_high", c.high)]
    if c.kind == "mask":
        return [("sequence_mask_metric", "geometric"), ("geo_mask_low", c.low), ("geo_mask_high", c.high)]
    return []


def skyrl_overrides(config: RolloutConfig, provenance: Provenance, facts: CheckpointFacts) -> str:
    """SkyRL command-line overrides, one per line; refused (NotExpressible) where SkyRL would
    build another engine."""
    refuse_if(TARGET, refusals(config, facts, provenance.method))
    engine = vllm_engine_args(config, provenance.checkpoint, replace(facts, shipped_kv_scales=False))
    engine.pop("model")  # trainer.policy.model.path: SkyRL's engine serves the policy it trains
    engine.pop("dtype")  # generator.inference_engine.model_dtype
    settings: list[tuple[str, object]] = [
        ("trainer.policy.model.path", provenance.checkpoint),
        (f"{ENGINE}.backend", "vllm"),
        (f"{ENGINE}.model_dtype", DTYPE_LIBRARY_NAMES[config.dtype]),
        *_leaves(f"{ENGINE}.engine_init_kwargs", engine),
        ("generator.sampling_params.temperature", config.sampling.temperature),
        ("generator.sampling_params.top_p", config.sampling.top_p),
        ("generator.sampling_params.max_generate_length", config.sampling.max_new_tokens),
        *((f"{CORRECTION}.{key}", value) for key, value in _correction(config)),
    ]
    if config.sampling.ignore_eos:
        settings.append(("generator.sampling_params.additional_kwargs.ignore_eos", True))
    notes = ["staleness 0: SkyRL's synchronous trainer samples each step's rollouts from the policy of that step; "
             "with train_batch_size above policy_mini_batch_size its later mini-batch updates train on rollouts "
             "of the policy before the first",
             "SkyRL's engine seed is engine_init_kwargs.seed (set on vLLM after trainer.seed)",
             *gpu_note(config, vllm.ELSEWHERE)]
    lines = [f"{key}={_value(value)}" for key, value in settings]
    return "\n".join(comment_block(provenance, TARGET, notes) + lines) + "\n"
