"""The FP8 KV cache: keys and values pass through FP8 on their way into the cache, with
scales calibrated on the first (prefill) states of each layer (vLLM's ``calculate_kv_scales``)."""
from __future__ import annotations

from typing import Sequence

import torch
from transformers import DynamicCache

from ...quant import fake_quant_kv, kv_scale_from


class Fp8KvCache(DynamicCache):
    """A :class:`DynamicCache` whose layer i stores keys and values rounded to
    ``kv_formats[i]`` (None: unchanged); ``granularity`` is ``tensor`` or ``head``."""

    def __init__(self, kv_formats: Sequence[str | None], granularity: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.kv_formats = list(kv_formats)
        self.granularity = granularity
        self.scales: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        fmt = self.kv_formats[layer_idx]
        if fmt is not None:
            if layer_idx not in self.scales:
                self.scales[layer_idx] = (
                    kv_scale_from(key_states, fmt, self.granularity),
                    kv_scale_from(value_states, fmt, self.granularity),
                )
            ks, vs = self.scales[layer_idx]
            key_states = fake_quant_kv(key_states, fmt, ks)
            value_states = fake_quant_kv(value_states, fmt, vs)
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


def make_cache(kv_formats: Sequence[str | None], granularity: str) -> DynamicCache:
    """A plain cache when no layer uses FP8, else an :class:`Fp8KvCache`."""
    if not any(kv_formats):
        return DynamicCache()
    return Fp8KvCache(kv_formats, granularity)
