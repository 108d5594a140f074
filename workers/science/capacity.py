"""KV-cache capacity from bytes per token, with per-layer dtypes (no torch needed).

bytes/token = sum over layers of 2 (K and V) * kv_heads * head_dim * bytes(layer's KV dtype).
The capacity ratio against BF16 is bf16 bytes/token over the config's: FP8 everywhere gives
2x; layers kept in BF16 pull it below 2x.

A model with sliding-window layers (Gemma 3: five of every six layers attend to the last
``sliding_window`` tokens only) holds at most that many tokens in those layers, so at a long
context the global layers carry almost all of the cache: ``at_context`` gives the bytes per
token and the ratio at the model's longest context, where keeping a sliding layer in BF16
costs little and keeping a global one costs much.
"""
from __future__ import annotations

from typing import Any, Sequence

KV_BYTES = {"none": 2.0, "bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}


def _value(model_config: Any, key: str) -> Any:
    """``key`` of a HF config object or dict (None where it has none)."""
    return model_config.get(key) if isinstance(model_config, dict) else getattr(model_config, key, None)


def kv_geometry(model_config: Any) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of a HF config object or dict."""

    def get(key: str) -> Any:
        return _value(model_config, key)

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


def sliding_windows(model_config: Any) -> list[int | None]:
    """Per layer, the window a sliding-attention layer holds (None: every token), from the
    config's ``layer_types`` and ``sliding_window``; all None for a model without them."""
    layers = kv_geometry(model_config)[0]
    types, window = _value(model_config, "layer_types"), _value(model_config, "sliding_window")
    if not types or not window or len(types) != layers:
        return [None] * layers
    return [int(window) if kind == "sliding_attention" else None for kind in types]


def _bytes_at(model_config, layer_formats: Sequence[str | None], windows: list[int | None], context: int) -> float:
    """Cache bytes of one ``context``-token sequence, per token."""
    _, kv_heads, head_dim = kv_geometry(model_config)
    held = [context if w is None else min(w, context) for w in windows]
    return sum(2 * kv_heads * head_dim * KV_BYTES[f or "bf16"] * n for f, n in zip(layer_formats, held, strict=True)) \
        / context


def kv_capacity(model_config, layer_formats: Sequence[str | None]) -> dict:
    layers = kv_geometry(model_config)[0]
    bf16 = kv_bytes_per_token(model_config, [None] * layers)
    cfg = kv_bytes_per_token(model_config, layer_formats)
    out: dict[str, Any] = {
        "bytes_per_token_bf16": bf16,
        "bytes_per_token": cfg,
        "capacity_ratio": bf16 / cfg,
        "fp8_layers": sum(1 for f in layer_formats if f and f.startswith("fp8")),
        "layers": layers,
    }
    windows = sliding_windows(model_config)
    context = _value(model_config, "max_position_embeddings")
    if any(w is not None for w in windows) and context:
        at_bf16 = _bytes_at(model_config, [None] * layers, windows, int(context))
        at_cfg = _bytes_at(model_config, layer_formats, windows, int(context))
        out["sliding_layers"] = sum(w is not None for w in windows)
        out["at_context"] = {"tokens": int(context), "bytes_per_token_bf16": at_bf16, "bytes_per_token": at_cfg,
                             "capacity_ratio": at_bf16 / at_cfg}
    return out
