"""The FP8 KV cache: keys and values pass through FP8 on their way into the cache, with
static scales fixed per checkpoint (:mod:`.kv_scales`), as vLLM's ``k_scale`` / ``v_scale``:
the same prompt gives the same result whatever batch it is measured in."""
from __future__ import annotations

from typing import Sequence

import torch
from transformers import DynamicCache

from ...quant import fake_quant_kv
from .kv_scales import KvAmax


class Fp8KvCache(DynamicCache):
    """A :class:`DynamicCache` whose layer i stores keys and values rounded to
    ``kv_formats[i]`` (None: unchanged) with the static scales of ``amax``;
    ``granularity`` is ``tensor`` or ``head``."""

    def __init__(self, kv_formats: Sequence[str | None], granularity: str, amax: KvAmax, **kwargs) -> None:
        super().__init__(**kwargs)
        self.kv_formats = list(kv_formats)
        self.scales: dict[int, tuple[torch.Tensor, torch.Tensor]] = {
            i: amax.scales(i, fmt, granularity) for i, fmt in enumerate(self.kv_formats) if fmt is not None
        }

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        fmt = self.kv_formats[layer_idx]
        if fmt is not None:
            ks, vs = self.scales[layer_idx]
            key_states = fake_quant_kv(key_states, fmt, ks.to(key_states.device))
            value_states = fake_quant_kv(value_states, fmt, vs.to(value_states.device))
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


def make_cache(kv_formats: Sequence[str | None], granularity: str, amax: KvAmax | None = None) -> DynamicCache:
    """A plain cache when no layer uses FP8, else an :class:`Fp8KvCache` with static scales."""
    if not any(kv_formats):
        return DynamicCache()
    if amax is None:
        raise ValueError("an FP8 KV cache needs static scales (kv_scales.static_kv_amax)")
    return Fp8KvCache(kv_formats, granularity, amax)
