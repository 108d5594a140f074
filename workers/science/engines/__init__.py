"""Rollout engines behind one interface (:mod:`.base`): ``hf`` and ``vllm``."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .._compat import hide_broken_vision_packages

hide_broken_vision_packages()

from ..config import RolloutConfig  # noqa: E402
from .base import RolloutEngine, Rollouts, Scores  # noqa: E402

if TYPE_CHECKING:
    import torch
    from torch import nn


def build_engine(model_dir: str, cfg: RolloutConfig, device: str | torch.device = "auto",
                 base_model: nn.Module | None = None, task: str | None = None, cache_dir: str | None = None,
                 **vllm_kwargs) -> RolloutEngine:
    """The rollout engine ``cfg.engine`` names, with ``cfg`` applied.  ``base_model`` (hf only)
    is an fp32 copy of the checkpoint the engine may perturb in place instead of loading it;
    ``task`` and ``cache_dir`` (hf only) choose the FP8 KV calibration set and where it is stored."""
    if cfg.engine == "hf":
        from .hf import HFEngine

        return HFEngine(model_dir, cfg, device, base_model=base_model, task=task, cache_dir=cache_dir)
    if cfg.engine == "vllm":
        from .vllm_engine import VLLMEngine

        return VLLMEngine(model_dir, cfg, **vllm_kwargs)
    raise ValueError(f"unknown engine {cfg.engine!r}")


__all__ = ["RolloutEngine", "Rollouts", "Scores", "build_engine"]
