"""prime-rl: the rollout part of its ``rl`` TOML (``uv run rl @ config.toml``), with the keys
of the version in ``manifests/prime-rl.json`` (read from its source: every table forbids
unknown keys but ``[inference.vllm]``, which goes to vLLM as engine arguments; those are
the product's own vLLM mapping)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from opdweb.exports import vllm
from opdweb.exports.base import Provenance, comment_block, gpu_note, nearest_engine, refuse_if
from opdweb.exports.quoting import toml_string
from workers.science.checkpoint_facts import CheckpointFacts
from workers.science.config import RolloutConfig
from workers.science.vllm_args import vllm_engine_args, vllm_engine_refusals

MANIFEST = json.loads((Path(__file__).parent / "manifests" / "prime-rl.json").read_text())
TARGET = f"prime-rl {MANIFEST['version']} (upstream {MANIFEST['commit'][:12]})"
#: The vLLM it runs, pinned by its lock file (the README's table of targets).
ENGINE_PIN = f"vLLM {MANIFEST['vllm_locked']} (its uv.lock; `vllm>=0.26.0`); the `[inference.vllm]` engine " \
             f"arguments are checked against vLLM {MANIFEST['vllm_locked']}'s own EngineArgs and accepted values"
GPUS = "as vLLM"

#: What prime-rl builds from each part of a rollout config (the README's table of targets).
BUILDS = {
    "weights": "as vLLM: `[inference.vllm]` takes the vLLM engine arguments",
    "activations": "as vLLM",
    "kv_cache": "as vLLM, but no scale file ships with it: scales from the checkpoint, else 1.0",
    "keep_bf16": "as vLLM (`[inference.vllm.quantization_config] ignore`)",
    "staleness": "`orchestrator.max_off_policy_steps` (an upper bound); 0: on-policy (only the trained policy's "
                 "own rollouts train)",
    "correction": "none of TIS / IcePop / masking: its loss masks tokens by probability difference (DPPO, 0.2)",
    "logprobs": "`logprobs_mode = \"processed_logprobs\"`; top_p always 1",
}


def refusals(config: RolloutConfig, facts: CheckpointFacts | None, method: str | None = None) -> list[str]:
    """Where prime-rl would run another rollout engine or loss than ``config``'s."""
    # the calibrated-KV scale file is the vLLM engine export's; this export does not ship it
    # its training sampling sends top_p 1 whatever vLLM would do with another: its own reason below
    problems = vllm_engine_refusals(config, replace(facts, shipped_kv_scales=False) if facts else None)
    if config.sampling.top_p < 1.0:
        problems.append("top_p < 1: prime-rl samples training rollouts with top_p 1")
    if config.sampling.temperature > 2.0:
        problems.append("temperature above 2: prime-rl's training sampling allows 0 to 2")
    if config.correction.kind != "none":
        problems.append(f"correction {config.correction.kind}: prime-rl has no TIS, IcePop or sequence masking "
                        "(its loss masks tokens by trainer-minus-inference probability, DPPO); admit with "
                        "correction none")
    return problems


def nearest(config: RolloutConfig) -> dict:
    """The nearest engine prime-rl runs: vLLM's, top_p 1, no correction."""
    sampling = {"top_p": 1.0, "temperature": min(config.sampling.temperature, 2.0)}
    return nearest_engine(config, "prime-rl", fp8="tensor", keeps_layers=True, sampling=sampling,
                          correction={"kind": "none"})


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def prime_rl_toml(config: RolloutConfig, provenance: Provenance, facts: CheckpointFacts) -> str:
    """The rollout part of a prime-rl config file; refused (NotExpressible) where prime-rl
    would build another engine."""
    refuse_if(TARGET, refusals(config, facts))
    engine = vllm_engine_args(config, provenance.checkpoint, replace(facts, shipped_kv_scales=False))
    engine.pop("model")  # [model] name fills inference.vllm.model (prime-rl requires them equal)
    table = engine.pop("quantization_config", None)
    notes = ["prime-rl's default loss masks tokens whose trainer-minus-inference probability leaves "
             "dppo_mask_low / dppo_mask_high (0.2): the correction it runs without being asked",
             "enable_fp32_lm_head false: prime-rl's default runs the lm_head in FP32, not the BF16 engine "
             "the admission check measured"]
    notes += gpu_note(config, vllm.ELSEWHERE)
    if config.staleness:
        notes.append(f"max_off_policy_steps {config.staleness} is an upper bound: rollouts come from policies 0 to "
                     f"{config.staleness} steps old; the admission check measured the oldest")
    else:
        notes.append("max_off_policy_steps 0: only rollouts of the policy being trained train (on-policy)")
    lines = comment_block(provenance, TARGET, notes) + [
        "",
        "[model]",
        f"name = {toml_string(provenance.checkpoint)}",
        "",
        "[orchestrator]",
        f"max_off_policy_steps = {config.staleness}",
        "",
        "[orchestrator.train.sampling]",
        f"temperature = {_toml_value(config.sampling.temperature)}",
        f"max_completion_tokens = {config.sampling.max_new_tokens}",
        "",
        "[inference]",
        "enable_fp32_lm_head = false",
        "",
        "[inference.vllm]",
    ] + [f"{key} = {_toml_value(value)}" for key, value in engine.items()]
    if table:
        lines += ["", "[inference.vllm.quantization_config]",
                  *(f"{key} = {_toml_value(value)}" for key, value in table.items())]
    return "\n".join(lines) + "\n"
