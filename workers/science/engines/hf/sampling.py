"""Decoding helpers of the ``hf`` engine: left padding, positions, and sampling with common
random numbers, fixed by the seed and each prompt's global index, in one of two couplings:

- ``inverse_cdf``: one uniform per prompt and position, the token where it falls in the
  cumulative distribution taken in vocabulary order.  Cheap, and what every measurement and
  training run samples with.
- ``gumbel``: one exponential per prompt, position and vocabulary entry, the token with the
  largest ``p / E`` (the exponential race vLLM's seeded sampler runs; the Gumbel-max trick).
  Two engines flip a token with probability at most ``2 TV / (1 + TV)`` of their two
  distributions, however the vocabulary is ordered.  Under ``inverse_cdf`` a small shift of
  mass spread over a large vocabulary moves every boundary of the cumulative distribution,
  and tokens flip far more often than the distributions differ: on SmolLM2's first response
  token, FP8 weights + KV moved 12.5 % of the mass (TV) and flipped the inverse-CDF token 44 %
  of the time.  Prefix drift asks where decodes part, so it samples with ``gumbel``."""
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


def step_exponentials(seed: int, offset: int, n: int, step: int, vocab: int) -> torch.Tensor:
    """[n, vocab] Exp(1) draws of decoding step ``step`` for prompts ``offset .. offset + n``,
    fixed by ``seed``, each prompt's global index and the step (``gumbel`` coupling)."""
    out = torch.empty(n, vocab, dtype=torch.float64)
    for i in range(n):
        g = torch.Generator().manual_seed(sequence_seed(sequence_seed(seed, offset + i), step))
        out[i].exponential_(generator=g)
    return out


def _sampled_probs(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """The distribution a token is drawn from: ``softmax(logits / T)``, restricted by top-p to
    the smallest set of most likely tokens whose mass reaches ``top_p`` (not renormalised)."""
    probs = torch.softmax(logits.double() / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep_sorted = (sorted_p.cumsum(-1) - sorted_p) < sampling.top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = probs * keep
    return probs


def race_tokens(logits: torch.Tensor, sampling: SamplingConfig, exponentials: torch.Tensor) -> torch.Tensor:
    """The ``gumbel`` coupling: per row, the token with the largest ``p / E``; temperature 0 is greedy."""
    if sampling.temperature == 0:
        return logits.argmax(-1)
    return (_sampled_probs(logits, sampling) / exponentials.to(logits.device)).argmax(-1)


def choose_tokens(logits: torch.Tensor, sampling: SamplingConfig, u: torch.Tensor) -> torch.Tensor:
    """The ``inverse_cdf`` coupling: inverse-CDF sampling in vocabulary order with one uniform
    per row; temperature 0 is greedy."""
    if sampling.temperature == 0:
        return logits.argmax(-1)
    probs = _sampled_probs(logits, sampling)
    cdf = probs.cumsum(-1)
    target = (u.to(cdf.device) * cdf[:, -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return idx.clamp_max(logits.shape[-1] - 1)
