"""Which parts of the model a rollout config perturbs, and which it keeps in BF16.

The targets are the linear layers inside decoder layers (never embeddings or ``lm_head``)
and each layer's KV cache, named ``model.layers.i.self_attn.kv_cache``.  ``keep_bf16``
entries (a layer index, a glob, or ``re:`` regex) exempt some of them; :func:`resolve_targets`
is the one place that turns a config into the perturbed linears and the per-layer KV
formats, for the engine and for the measurement session alike.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ...config import RolloutConfig
from ...module_names import kv_pseudo_name, layer_index, resolve_keep_bf16
from ...quant import check_block


def decoder_layer_count(model: nn.Module) -> int:
    return int(model.config.num_hidden_layers)


def decoder_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """Every linear layer inside a decoder layer: the targets of quantization and noise."""
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and layer_index(n) is not None}


@dataclass(frozen=True)
class RolloutTargets:
    """What ``cfg`` does to one model: the decoder linears, the names kept in BF16, the
    linears it perturbs, and the KV format of each layer (None: BF16)."""

    linears: dict[str, nn.Linear]
    kept: frozenset[str]
    perturbed: list[str]
    kv_formats: list[str | None]


def resolve_targets(model: nn.Module, cfg: RolloutConfig) -> RolloutTargets:
    """Resolve ``cfg.keep_bf16`` against ``model`` (errors name the entry) into the targets."""
    n_layers = decoder_layer_count(model)
    linears = decoder_linears(model)
    kept = resolve_keep_bf16(cfg.keep_bf16, list(linears), n_layers)
    kv_formats: list[str | None] = [
        None if cfg.kv_cache == "none" or kv_pseudo_name(i) in kept else cfg.kv_cache for i in range(n_layers)
    ]
    return RolloutTargets(linears, frozenset(kept), [n for n in linears if n not in kept], kv_formats)


def check_weight_blocks(targets: RolloutTargets, cfg: RolloutConfig) -> None:
    """Refuse a ``block_size`` that does not tile every weight the config quantizes."""
    if cfg.weights == "bf16":
        return
    for name in targets.perturbed:
        shape = tuple(targets.linears[name].weight.shape)
        check_block(shape, cfg.weights, cfg.weight_scale, cfg.block_size, f"{name}.weight")
