"""Starting points for the config form: the engines teams screen most often.  Each is a
partial config; the schema fills in the rest."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Preset:
    slug: str
    title: str
    config: dict = field(default_factory=dict)


PRESETS = [
    Preset("bf16", "BF16 (the reference engine)", {}),
    Preset("fp8-w-tensor", "FP8 weights, per-tensor scales", {"weights": "fp8_e4m3", "weight_scale": "tensor"}),
    Preset("fp8-w-channel", "FP8 weights, per-channel scales", {"weights": "fp8_e4m3", "weight_scale": "channel"}),
    Preset("fp8-w-block", "FP8 weights, 128×128 block scales",
           {"weights": "fp8_e4m3", "weight_scale": "block", "block_size": 128}),
    Preset("fp8-w-kv", "FP8 weights + FP8 KV cache", {"weights": "fp8_e4m3", "kv_cache": "fp8_e4m3"}),
    Preset("fp8-recipe", "FP8 recipe, first layer and MLP down-projections kept in BF16",
           {"weights": "fp8_e4m3", "kv_cache": "fp8_e4m3", "keep_bf16": [0, "model.layers.*.mlp.down_proj"]}),
    Preset("vllm-fp8", "vLLM's online FP8 (fp8_per_tensor, W8A8) + FP8 KV cache at scale 1.0",
           {"weights": "fp8_e4m3", "activations": "fp8_e4m3", "kv_cache": "fp8_e4m3", "kv_scales": "unit"}),
    Preset("block-fp8", "verl's and slime's FP8 rollouts (128×128 block W8A8) + FP8 KV cache at scale 1.0",
           {"weights": "fp8_e4m3", "weight_scale": "block", "block_size": 128, "activations": "fp8_e4m3",
            "kv_cache": "fp8_e4m3", "kv_scales": "unit"}),
    Preset("async-1", "Asynchronous, weights 1 step stale", {"staleness": 1}),
    Preset("async-2", "Asynchronous, weights 2 steps stale", {"staleness": 2}),
    Preset("noise-0.1", "Weight noise σ = 0.1 (of each tensor's RMS)", {"noise_sigma": 0.1}),
]

PRESETS_BY_SLUG = {preset.slug: preset for preset in PRESETS}
