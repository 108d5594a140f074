"""The ``train`` job's entry point: the method's config, its trainer, the loop."""
from __future__ import annotations

from ..reporting import Reporter
from .config import GRPOConfig, OPDConfig, TrainJobConfig


def trainer_for(config: OPDConfig | GRPOConfig, reporter: Reporter | None = None):
    """The trainer of ``config``'s method, built (and so checked) before any training."""
    if isinstance(config, OPDConfig):
        from .opd import OPDTrainer

        return OPDTrainer(config, reporter)
    from .grpo import GRPOTrainer

    return GRPOTrainer(config, reporter)


def run_training(config: TrainJobConfig | OPDConfig | GRPOConfig, reporter: Reporter | None = None) -> dict:
    """Train as ``config`` says; returns the report (accuracies, checkpoint, time split)."""
    method_config = config.method_config() if isinstance(config, TrainJobConfig) else config
    return trainer_for(method_config, reporter).train()
