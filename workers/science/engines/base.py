"""The one engine interface: ``sample`` (rollouts) and ``score`` (teacher-forced logprobs).

Logprobs are *raw*: log-softmax of the model's logits before temperature / top-p (vLLM's
``logprobs_mode="raw_logprobs"``), so a rollout engine and the trainer are compared on
the same quantity whatever the sampling settings.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from ..config import SamplingConfig


@dataclass
class Rollouts:
    """Sampled responses of one batch, padded to the longest; ``mask`` marks real tokens
    (the EOS token included, everything after it excluded)."""

    prompt_ids: list[list[int]]
    tokens: torch.Tensor  # [B, L] int64, pad after EOS
    mask: torch.Tensor  # [B, L] bool
    logprobs: torch.Tensor  # [B, L] float32, raw logprob of each sampled token
    full_logprobs: torch.Tensor | None = None  # [B, L, V] float32 where the engine can

    def responses(self) -> list[list[int]]:
        return [row[m].tolist() for row, m in zip(self.tokens, self.mask)]


@dataclass
class Scores:
    logprobs: torch.Tensor  # [B, L] float32
    full_logprobs: torch.Tensor | None = None  # [B, L, V] float32


class RolloutEngine(Protocol):
    name: str
    vocab_size: int
    eos_token_id: int | None

    def sample(
        self,
        prompt_ids: Sequence[Sequence[int]],
        sampling: SamplingConfig,
        seed: int,
        offset: int = 0,
        return_full: bool = False,
    ) -> Rollouts: ...

    def score(
        self, prompt_ids: Sequence[Sequence[int]], tokens: torch.Tensor, mask: torch.Tensor, return_full: bool = False
    ) -> Scores: ...

    def close(self) -> None: ...


def prompt_uniforms(seed: int, offset: int, n: int, length: int) -> torch.Tensor:
    """One uniform per (prompt, position), fixed by ``seed`` and the prompt's global index:
    two engines given the same seed sample with common random numbers, so their decodes
    coincide until their distributions differ enough to flip a token."""
    out = torch.empty(n, length, dtype=torch.float64)
    for i in range(n):
        g = torch.Generator().manual_seed((seed * 1_000_003 + offset + i) % (2**63 - 1))
        out[i] = torch.rand(length, generator=g, dtype=torch.float64)
    return out
