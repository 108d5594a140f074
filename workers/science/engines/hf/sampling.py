"""Decoding helpers of the ``hf`` engine: left padding, positions, and inverse-CDF sampling
with common random numbers (one uniform per prompt and position, fixed by the seed)."""
from __future__ import annotations

from typing import Sequence

import torch

from ...config import SamplingConfig
from ..base import sequence_seed


def left_pad(prompt_ids: Sequence[Sequence[int]], pad_id: int,
             device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, W] token ids padded on the left, and the attention mask (1 on real tokens)."""
    width = max(len(p) for p in prompt_ids)
    ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
    for i, p in enumerate(prompt_ids):
        if len(p):
            ids[i, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
            mask[i, width - len(p):] = 1
    return ids.to(device), mask.to(device)


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids that start at 0 on each row's first real token."""
    return (mask.cumsum(-1) - 1).clamp_min(0)


def prompt_uniforms(seed: int, offset: int, n: int, length: int) -> torch.Tensor:
    """One uniform per (prompt, position), fixed by ``seed`` and the prompt's global index:
    two engines given the same seed sample with common random numbers, so their decodes
    coincide until their distributions differ enough to flip a token."""
    out = torch.empty(n, length, dtype=torch.float64)
    for i in range(n):
        g = torch.Generator().manual_seed(sequence_seed(seed, offset + i))
        out[i] = torch.rand(length, generator=g, dtype=torch.float64)
    return out


def choose_tokens(logits: torch.Tensor, sampling: SamplingConfig, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling in vocabulary order with one uniform per row (common random
    numbers across engines); temperature 0 is greedy; top-p keeps the smallest set of most
    likely tokens whose mass reaches ``top_p``."""
    if sampling.temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.double() / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep_sorted = (sorted_p.cumsum(-1) - sorted_p) < sampling.top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = probs * keep
    cdf = probs.cumsum(-1)
    target = (u.to(cdf.device) * cdf[:, -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return idx.clamp_max(logits.shape[-1] - 1)
