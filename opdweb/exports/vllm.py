"""vLLM engine arguments: ``LLM(**engine_args)`` and ``SamplingParams(**sampling_params)``,
built by the same mapping as the product's own ``vllm`` engine
(:mod:`workers.science.engines.vllm_args`), so the engine admitted is the engine started."""
from __future__ import annotations

import json
from dataclasses import asdict

from opdweb.exports.base import Provenance
from workers.science.checkpoint_facts import CheckpointFacts
from workers.science.config import RolloutConfig
from workers.science.engines.vllm_args import VLLM_VERSION, vllm_engine_args, vllm_sampling_params

TARGET = f"vLLM {VLLM_VERSION}"


def notes(config: RolloutConfig) -> list[str]:
    out = []
    if config.staleness:
        out.append(f"staleness {config.staleness} is the trainer's setting (how old the synced weights may be), "
                   "not an engine argument")
    if config.correction.kind != "none":
        out.append(f"correction {config.correction.kind} is the trainer's setting, not an engine argument")
    if config.weights == "fp8_e4m3" and config.weight_scale == "tensor":
        out.append("fp8_per_tensor scales activations per token where CUTLASS FP8 runs (Ada, Hopper), per tensor "
                   "elsewhere; the admission check measured per-tensor activation scales, the coarser of the two")
    return out


def vllm_engine_args_export(config: RolloutConfig, provenance: Provenance, facts: CheckpointFacts) -> str:
    """JSON: ``LLM(**engine_args)`` and ``SamplingParams(**sampling_params)``."""
    document = {
        "opdweb": {**asdict(provenance), "target": TARGET, "notes": notes(config)},
        "engine_args": vllm_engine_args(config, provenance.checkpoint, facts),
        "sampling_params": vllm_sampling_params(config.sampling),
    }
    return json.dumps(document, indent=2) + "\n"
