"""KV-cache capacity from bytes per token, with per-layer dtypes (no torch needed).

bytes/token = sum over layers of 2 (K and V) * kv_heads * head_dim * bytes(layer's KV dtype).
The capacity ratio against BF16 is bf16 bytes/token over the config's: FP8 everywhere gives
2x; layers kept in BF16 pull it below 2x.
"""
from __future__ import annotations

from typing import Any, Sequence

KV_BYTES = {"none": 2.0, "bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}


def kv_geometry(model_config: Any) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of a HF config object or dict."""

    def get(key: str) -> Any:
        return model_config.get(key) if isinstance(model_config, dict) else getattr(model_config, key, None)

    layers = int(get("num_hidden_layers"))
    heads = int(get("num_attention_heads"))
    kv_heads = int(get("num_key_value_heads") or heads)
    head_dim = get("head_dim") or int(get("hidden_size")) // heads
    return layers, kv_heads, int(head_dim)


def kv_bytes_per_token(model_config, layer_formats: Sequence[str | None]) -> float:
    """``layer_formats[i]`` is the KV format of layer i (None = the BF16 baseline)."""
    layers, kv_heads, head_dim = kv_geometry(model_config)
    if len(layer_formats) != layers:
        raise ValueError(f"{len(layer_formats)} layer formats for {layers} layers")
    return float(sum(2 * kv_heads * head_dim * KV_BYTES[f or "bf16"] for f in layer_formats))


def kv_capacity(model_config, layer_formats: Sequence[str | None]) -> dict:
    layers = kv_geometry(model_config)[0]
    bf16 = kv_bytes_per_token(model_config, [None] * layers)
    cfg = kv_bytes_per_token(model_config, layer_formats)
    return {
        "bytes_per_token_bf16": bf16,
        "bytes_per_token": cfg,
        "capacity_ratio": bf16 / cfg,
        "fp8_layers": sum(1 for f in layer_formats if f and f.startswith("fp8")),
        "layers": layers,
    }
