"""The ``train`` job's entry point: the method's config, its trainer, the loop."""
from __future__ import annotations

from ..config import ConfigError
from ..reporting import Reporter
from .config import GRPOConfig, OPDConfig, TrainJobConfig
from .results import TrainingResult


def trainer_for(config: OPDConfig | GRPOConfig, reporter: Reporter | None = None):
    """The trainer of ``config``'s method, built (and so checked) before any training."""
    if isinstance(config, OPDConfig):
        from .opd import OPDTrainer

        return OPDTrainer(config, reporter)
    from .grpo import GRPOTrainer

    return GRPOTrainer(config, reporter)


def run_training(config: TrainJobConfig | OPDConfig | GRPOConfig, reporter: Reporter | None = None) -> TrainingResult:
    """Train as ``config`` says; returns the report (accuracies, checkpoint, time split)."""
    method_config = config.method_config() if isinstance(config, TrainJobConfig) else config
    if method_config.checkpoint_every and not method_config.out:
        # Checked here, not in the schema: a job's ``out`` is filled in by the product in the worker.
        raise ConfigError("checkpoint_every needs out (a directory for the checkpoints)")
    return trainer_for(method_config, reporter).train()
