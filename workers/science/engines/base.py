"""The one engine interface: ``sample`` (rollouts) and ``score`` (teacher-forced logprobs).

Logprobs are taken under the sampling temperature on both sides, as trainers compute
them (verl divides the logits by the temperature in the actor and in the rollout):
``log_softmax(logits / T)`` (:data:`LOGPROB_TRANSFORM`).  Tokens are sampled from that
same tempered distribution, so k1 / k3 estimate KL(rollout || trainer) of the distribution
actually sampled.  Top-p is a sampling filter only: it is not applied to either side's
logprobs (trainers do not apply it when they score).  Greedy decoding (T = 0) scores raw
logprobs (T = 1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import torch

from ..config import SamplingConfig


@dataclass
class Rollouts:
    """Sampled responses of one batch, padded to the longest; ``mask`` marks real tokens
    (the EOS token included, everything after it excluded)."""

    prompt_ids: list[list[int]]
    tokens: torch.Tensor  # [B, L] int64, pad after EOS
    mask: torch.Tensor  # [B, L] bool
    logprobs: torch.Tensor  # [B, L] float32, tempered logprob of each sampled token
    full_logprobs: torch.Tensor | None = None  # [B, L, V] float32 where the engine can

    def responses(self) -> list[list[int]]:
        return [row[m].tolist() for row, m in zip(self.tokens, self.mask, strict=True)]


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
        on_step: Callable[[int, int], None] | None = None,  # (tokens decoded, of how many), as it goes
        coupling: str = "inverse_cdf",  # how common random numbers pick a token (hf/sampling.py)
    ) -> Rollouts: ...

    def score(
        self, prompt_ids: Sequence[Sequence[int]], tokens: torch.Tensor, mask: torch.Tensor, return_full: bool = False,
        temperature: float = 1.0,
    ) -> Scores: ...

    def info(self) -> dict: ...

    def close(self) -> None: ...


#: What every engine's logprobs are, stated in reports.
LOGPROB_TRANSFORM = ("log_softmax(logits / T) on both sides (T = sampling temperature; T = 0 scores at T = 1); "
                     "top-p filters sampling only")


def logprob_temperature(sampling: SamplingConfig) -> float:
    """The temperature logprobs are taken at: the sampling temperature, 1 for greedy."""
    return sampling.temperature if sampling.temperature > 0 else 1.0


#: vLLM takes per-request seeds in a 32-bit signed range; both engines use this modulus.
SEED_MODULUS = 2**31 - 1


def sequence_seed(seed: int, index: int) -> int:
    """The sampling seed of the prompt with global ``index`` in a run seeded ``seed``: the
    same prompt gets the same seed in every batch layout and in both engines."""
    return (seed * 1_000_003 + index) % SEED_MODULUS


def special_token_ids(hf_config) -> tuple[int | None, int]:
    """(EOS id, pad id) of a Hugging Face model config: the first EOS where it lists
    several; pad falls back to EOS, then 0."""
    eos = getattr(hf_config, "eos_token_id", None)
    eos_id = eos[0] if isinstance(eos, (list, tuple)) else eos
    pad = getattr(hf_config, "pad_token_id", None)
    return eos_id, int(pad if pad is not None else (eos_id or 0))
