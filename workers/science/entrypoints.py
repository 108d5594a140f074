"""The one registry of job kinds, read by the web process, the Celery worker and the CLI.

A kind is declared once, here: its name, config schema, entry point, queue, time limit,
whether a lost run may resume, an example config and the formatter of its report.
Adding a kind means adding one :func:`register` call.

Every entry point is ``function(config, reporter, **options) -> dict`` (JSON-serialisable);
it raises :class:`~workers.science.config.ConfigError` for configs that cannot run and
:class:`~workers.science.reporting.Cancelled` when the reporter asks to stop.  Entry points
are named as ``"module:function"`` and imported only when a job runs, so importing this
module imports no torch.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from pydantic import BaseModel

from .budget.config import AdmissionJobConfig, CalibrationJobConfig, NoiseSolveJobConfig
from .config import DriftJobConfig, MismatchJobConfig, SensitivityJobConfig
from .formatting import (format_admission, format_calibration, format_drift, format_mismatch, format_noise_solve,
                         format_sensitivity, format_time_to_quality, format_training)
from .reporting import Reporter
from .selftest import SelftestConfig
from .training.config import TimeToQualityConfig, TrainJobConfig


@dataclass(frozen=True)
class CliOption:
    """A command-line option of a kind that is not a config field (e.g. a local dump
    file): ``--name`` is passed to the entry point as the keyword ``dest``."""

    name: str
    dest: str
    help: str


@dataclass(frozen=True)
class JobKind:
    name: str
    config: type[BaseModel]
    entry: str  # "module:function", imported when the job runs
    queue: Literal["gpu", "cpu"]
    time_limit_s: int
    example: Callable[[str], dict]  # a starting config, given the toy student's directory
    resumable: bool = False
    max_attempts: int = 1
    formatter: Callable[[dict], str] | None = None  # the CLI's human-readable report
    cli_options: tuple[CliOption, ...] = field(default_factory=tuple)
    cli_name: str | None = None  # the subcommand, where a verb reads better than the kind's name

    @property
    def command(self) -> str:
        return self.cli_name or self.name

    @property
    def description(self) -> str:
        """The config schema's first docstring line."""
        lines = (self.config.__doc__ or "").strip().splitlines()
        return lines[0] if lines else ""

    def run(self, config: BaseModel, reporter: Reporter, **options: Any) -> dict:
        module, _, function = self.entry.partition(":")
        return getattr(importlib.import_module(module), function)(config, reporter, **options)


class UnknownJobKind(ValueError):
    pass


KINDS: dict[str, JobKind] = {}


def register(kind: JobKind) -> JobKind:
    KINDS[kind.name] = kind
    return kind


def get_kind(name: str) -> JobKind:
    try:
        return KINDS[name]
    except KeyError:
        raise UnknownJobKind(f"unknown job kind {name!r}; known kinds: {', '.join(sorted(KINDS))}") from None


_FP8_W_KV = {"weights": "fp8_e4m3", "weight_scale": "channel", "kv_cache": "fp8_e4m3"}

register(JobKind(
    name="selftest",
    config=SelftestConfig,
    entry="workers.science.selftest:run_selftest",
    queue="cpu",
    time_limit_s=3600,
    resumable=True,
    max_attempts=3,
    example=lambda student: {"steps": 200, "sleep_s": 0.05},
))
register(JobKind(
    name="mismatch",
    config=MismatchJobConfig,
    entry="workers.science.mismatch:run_mismatch",
    queue="gpu",
    time_limit_s=2 * 3600,
    example=lambda student: {"model": student, "rollout": _FP8_W_KV, "prompts": 256, "max_new_tokens": 16,
                             "device": "auto"},
    formatter=format_mismatch,
    cli_options=(CliOption("--dump", "dump_path",
                           "write one JSON line per response (token ids, both logprob lists)"),),
))
register(JobKind(
    name="sensitivity",
    config=SensitivityJobConfig,
    entry="workers.science.sensitivity:run_sensitivity",
    queue="gpu",
    time_limit_s=8 * 3600,
    example=lambda student: {"model": student, "rollout": _FP8_W_KV, "prompts": 64, "max_new_tokens": 16,
                             "target": 2.0},
    formatter=format_sensitivity,
))
register(JobKind(
    name="drift",
    config=DriftJobConfig,
    entry="workers.science.drift:run_drift",
    queue="gpu",
    time_limit_s=2 * 3600,
    example=lambda student: {"model": student, "rollout": {"noise_sigma": 0.1}, "prompts": 128,
                             "max_new_tokens": 16},
    formatter=format_drift,
))
register(JobKind(
    name="train",
    config=TrainJobConfig,
    entry="workers.science.training.job:run_training",
    queue="gpu",
    time_limit_s=8 * 3600,
    resumable=True,
    max_attempts=3,
    example=lambda student: {"model": student, "teacher": str(Path(student).parent / "teacher"), "method": "opd",
                             "loss": "full", "rollout": _FP8_W_KV, "steps": 100, "batch_size": 64, "lr": 1e-4,
                             "eval_every": 10, "device": "auto"},
    formatter=format_training,
))
register(JobKind(
    name="time-to-quality",
    config=TimeToQualityConfig,
    entry="workers.science.training.time_to_quality:run_time_to_quality",
    queue="gpu",
    time_limit_s=24 * 3600,
    example=lambda student: {"model": student, "teacher": str(Path(student).parent / "teacher"), "method": "opd",
                             "target": 0.5, "seeds": 3, "steps": 200, "eval_every": 5, "device": "auto"},
    formatter=format_time_to_quality,
))
register(JobKind(
    name="noise-solve",
    config=NoiseSolveJobConfig,
    entry="workers.science.budget.noise:run_noise_solve",
    queue="gpu",
    time_limit_s=2 * 3600,
    resumable=True,  # measuring again is harmless (the BF16 reference is cached)
    max_attempts=3,
    example=lambda student: {"model": student, "target_multiple": 100.0, "prompts": 128},
    formatter=format_noise_solve,
))
register(JobKind(
    name="calibration",
    config=CalibrationJobConfig,
    entry="workers.science.budget.calibration:run_calibration",
    queue="cpu",  # it only waits for its children (gpu queue) and does the arithmetic
    time_limit_s=48 * 3600,
    resumable=True,
    max_attempts=3,
    example=lambda student: {"model": student, "teacher": str(Path(student).parent / "teacher"), "method": "opd",
                             "loss": "full", "steps": 30, "batch_size": 64, "levels": [10.0, 100.0, 1000.0],
                             "seeds": 3, "device": "auto"},
    formatter=format_calibration,
    cli_name="calibrate",
))
register(JobKind(
    name="admission",
    config=AdmissionJobConfig,
    entry="workers.science.budget.admission:run_admission",
    queue="gpu",
    time_limit_s=2 * 3600,
    example=lambda student: {"model": student, "rollout": _FP8_W_KV, "prompts": 128, "max_new_tokens": 16},
    formatter=format_admission,
    cli_name="admit",
))

__all__ = ["KINDS", "CliOption", "JobKind", "UnknownJobKind", "get_kind", "register"]
