"""The science's public entry points, one place for the CLI and the Celery tasks.

``ENTRYPOINTS[kind] = (ConfigClass, function)``; every function is
``function(config, reporter) -> dict`` (JSON-serialisable) and raises
:class:`~workers.science.config.ConfigError` for configs that cannot run and
:class:`~workers.science.reporting.Cancelled` when the reporter asks to stop.
Importing this module does not import torch.
"""
from __future__ import annotations

from typing import Any, Callable

from .config import ConfigError, DriftJobConfig, MismatchJobConfig, SensitivityJobConfig
from .reporting import Reporter


def run_mismatch(cfg: MismatchJobConfig, reporter: Reporter | None = None, **kwargs: Any) -> dict:
    from .mismatch import run_mismatch as impl

    return impl(cfg, reporter, **kwargs)


def run_sensitivity(cfg: SensitivityJobConfig, reporter: Reporter | None = None) -> dict:
    from .sensitivity import run_sensitivity as impl

    return impl(cfg, reporter)


def run_drift(cfg: DriftJobConfig, reporter: Reporter | None = None) -> dict:
    from .drift import run_drift as impl

    return impl(cfg, reporter)


ENTRYPOINTS: dict[str, tuple[type, Callable[..., dict]]] = {
    "mismatch": (MismatchJobConfig, run_mismatch),
    "sensitivity": (SensitivityJobConfig, run_sensitivity),
    "drift": (DriftJobConfig, run_drift),
}

__all__ = ["ENTRYPOINTS", "ConfigError", "run_drift", "run_mismatch", "run_sensitivity"]
