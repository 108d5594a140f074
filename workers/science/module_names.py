"""The names a rollout config speaks of, without loading a model: decoder linears, the
per-layer KV-cache pseudo-names, and ``keep_bf16`` resolved against them.

The engines resolve ``keep_bf16`` against the modules of the model they load
(:func:`.engines.hf.targets.resolve_targets`); the exports resolve it against the module
names of the checkpoint's architecture (:func:`decoder_linear_names`), read from its
``config.json`` alone, so a web process can say what a trainer's engine will keep in BF16
without torch."""
from __future__ import annotations

import re
from typing import Sequence

from .config import ConfigError, keep_pattern

_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")

#: The decoder linears, per layer, of the architectures whose checkpoints name their modules
#: this way: the Llama family (Llama, Mistral, Qwen2/3, SmolLM2) and Gemma 3 (text).
DECODER_LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
NAMED_ARCHITECTURES = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                 "Qwen3ForCausalLM", "Gemma3ForCausalLM"})


def layer_index(name: str) -> int | None:
    m = _LAYER_RE.search(name)
    return int(m.group(1)) if m else None


def kv_pseudo_name(i: int) -> str:
    return f"model.layers.{i}.self_attn.kv_cache"


def decoder_linear_names(n_layers: int) -> list[str]:
    """Every decoder linear of an ``n_layers`` checkpoint of a named architecture, as Hugging Face names them."""
    return [f"model.layers.{i}.{part}" for i in range(n_layers) for part in DECODER_LINEARS]


def resolve_keep_bf16(entries: Sequence[int | str], module_names: Sequence[str], n_layers: int) -> set[str]:
    """Names (linear modules and KV-cache pseudo-names) kept in BF16; errors name the entry."""
    kv_names = [kv_pseudo_name(i) for i in range(n_layers)]
    universe = list(module_names) + kv_names
    kept: set[str] = set()
    for entry in entries:
        if isinstance(entry, int):
            if not 0 <= entry < n_layers:
                raise ConfigError(
                    f"keep_bf16 layer index {entry} is out of range: the model has {n_layers} layers "
                    f"(0..{n_layers - 1})"
                )
            kept.update(n for n in universe if layer_index(n) == entry)
            continue
        matches = keep_pattern(entry)
        hits = [n for n in universe if matches(n)]
        if not hits:
            example = module_names[0] if module_names else "model.layers.0.mlp.up_proj"
            raise ConfigError(f"keep_bf16 pattern {entry!r} matches no module (names look like {example!r})")
        kept.update(hits)
    return kept


__all__ = ["NAMED_ARCHITECTURES", "DECODER_LINEARS", "kv_pseudo_name", "layer_index", "decoder_linear_names",
           "resolve_keep_bf16"]
