"""vLLM engine arguments: ``LLM(**engine_args)`` and ``SamplingParams(**sampling_params)``."""
from __future__ import annotations

import json
from dataclasses import asdict

from opdweb.exports.base import Provenance, fp8_weights, notes
from workers.science.config import DTYPE_LIBRARY_NAMES


def _kv_layers_kept(config: dict) -> list[int]:
    """Layer indices in keep_bf16: the whole layer, KV cache included, stays BF16."""
    return [entry for entry in config["keep_bf16"] if isinstance(entry, int)]


def _ignored_layers(config: dict) -> list[str]:
    """keep_bf16 as module-name patterns: a layer index names the whole layer."""
    return [f"model.layers.{e}.*" if isinstance(e, int) else e for e in config["keep_bf16"]]


def vllm_engine_args(config: dict, provenance: Provenance) -> str:
    """JSON: ``LLM(**engine_args)`` and ``SamplingParams(**sampling_params)``."""
    engine = {"model": provenance.checkpoint, "dtype": DTYPE_LIBRARY_NAMES[config["dtype"]]}
    if fp8_weights(config):
        engine["quantization"] = "fp8"
        if config["keep_bf16"]:
            engine["hf_overrides"] = {"quantization_config": {
                "quant_method": "fp8", "activation_scheme": "dynamic", "ignored_layers": _ignored_layers(config)}}
    engine["kv_cache_dtype"] = "auto" if config["kv_cache"] == "none" else config["kv_cache"]
    if config["kv_cache"] != "none":
        engine["calculate_kv_scales"] = True
        if _kv_layers_kept(config):
            engine["kv_cache_dtype_skip_layers"] = [str(i) for i in _kv_layers_kept(config)]
    engine["seed"] = config["seed"]
    sampling = config["sampling"]
    document = {
        "opdweb": {**asdict(provenance), "notes": notes(config, "vllm")},
        "engine_args": engine,
        "sampling_params": {"temperature": sampling["temperature"], "top_p": sampling["top_p"],
                            "max_tokens": sampling["max_new_tokens"], "ignore_eos": sampling["ignore_eos"],
                            "logprobs": 0},
    }
    return json.dumps(document, indent=2) + "\n"
