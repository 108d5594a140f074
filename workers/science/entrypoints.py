"""The one registry of job kinds, read by the web process, the Celery worker and the CLI.

A kind is declared once, here: its name, config schema, entry point, queue, time limit,
whether a lost run may resume, an example config and the formatter of its report.
Adding a kind means adding one :func:`register` call.

Every entry point is ``function(config, reporter, **options) -> Result``, the kind's typed
result (:mod:`.results` and the budget and training packages' ``results``);
:meth:`JobKind.run` returns it validated, so a malformed result fails the job that made it
(:class:`MalformedResult`).  An entry point raises
:class:`~workers.science.config.ConfigError` for configs that cannot run and
:class:`~workers.science.reporting.Cancelled` when the reporter asks to stop.  Entry points
are named as ``"module:function"`` and imported only when a job runs, so importing this
module imports no torch.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ValidationError

from .budget.config import AdmissionJobConfig, CalibrationJobConfig, NoiseSolveJobConfig
from .budget.results import AdmissionVerdict, CalibrationResult, NoiseSolveResult
from .checkpoints.describe import CheckpointDescription, DescribeConfig
from .children import LocalChildRunner
from .config import DriftJobConfig, MismatchJobConfig, SensitivityJobConfig
from .formatting import (
    format_admission,
    format_calibration,
    format_drift,
    format_mismatch,
    format_noise_solve,
    format_sensitivity,
    format_time_to_quality,
    format_training,
)
from .kinds import Kind
from .reporting import NullReporter, Reporter
from .results import DriftReport, MismatchReport, SelftestResult, SensitivityReport
from .selftest import SelftestConfig
from .training.config import TimeToQualityConfig, TrainJobConfig
from .training.results import TimeToQualityResult, TrainingResult


@dataclass(frozen=True)
class CliOption:
    """A command-line option of a kind that is not a config field (e.g. a local dump
    file): ``--name`` is passed to the entry point as the keyword ``dest``."""

    name: str
    dest: str
    help: str


class MalformedResult(RuntimeError):
    """An entry point returned something that is not its kind's result."""


@dataclass(frozen=True)
class JobKind:
    name: str  # a :class:`~.kinds.Kind` for the product's own kinds
    config: type[BaseModel]
    result: type[BaseModel]  # what the entry point returns, and what the product stores and reads back
    entry: str  # "module:function", imported when the job runs
    queue: Literal["gpu", "cpu"]
    time_limit_s: int
    example: Callable[[str], dict]  # a starting config, given the toy student's directory
    resumable: bool = False
    # A person waits for its answer (an admission check, a measurement): its jobs go ahead
    # of batch work (training, scans, calibrations) on the same queue (opdweb.jobs.scheduling).
    interactive: bool = False
    # It stops at its next step when asked and resumes exactly where it stopped (training:
    # checkpoint, optimizer and RNG state), so it may make way for interactive work.
    preemptible: bool = False
    max_attempts: int = 1
    formatter: Callable[[Any], str] | None = None  # the CLI's human-readable report of a result
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

    def run(self, config: BaseModel, reporter: Reporter | None = None, **options: Any) -> BaseModel:
        """Run the entry point; its result, validated.  A reporter that cannot run child
        jobs itself (the command line's) gets them run here, one after the other."""
        reporter = reporter or NullReporter()
        if getattr(reporter, "run_children", None) is None:
            reporter = LocalChildRunner(reporter, get_kind)
        module, _, function = self.entry.partition(":")
        return self.validated(getattr(importlib.import_module(module), function)(config, reporter, **options))

    def validated(self, result: Any) -> BaseModel:
        """``result`` as this kind's result model (a dict, such as a stored one, is validated);
        raises :class:`MalformedResult` saying what is wrong."""
        if isinstance(result, self.result):
            return result
        if isinstance(result, BaseModel):
            result = result.model_dump(mode="json")
        try:
            return self.result.model_validate(result)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'result'}: {e['msg']}"
                                 for e in exc.errors(include_url=False)[:10])
            raise MalformedResult(f"the {self.name} job's result is not a {self.result.__name__}: {problems}") from None


class UnknownJobKind(ValueError):
    pass


KINDS: dict[str, JobKind] = {}


def register(kind: JobKind) -> JobKind:
    KINDS[kind.name] = kind
    return kind


def get_kind(name: str) -> JobKind:
    """The kind named ``name``; raises :class:`UnknownJobKind`."""
    try:
        return KINDS[name]
    except KeyError:
        raise UnknownJobKind(f"unknown job kind {name!r}; known kinds: {', '.join(sorted(KINDS))}") from None


_FP8_W_KV = {"weights": "fp8_e4m3", "weight_scale": "channel", "kv_cache": "fp8_e4m3"}

register(JobKind(
    name=Kind.SELFTEST,
    interactive=True,
    config=SelftestConfig,
    result=SelftestResult,
    entry="workers.science.selftest:run_selftest",
    queue="cpu",
    time_limit_s=3600,
    resumable=True,
    max_attempts=3,
    example=lambda student: {"steps": 200, "sleep_s": 0.05},
))
register(JobKind(
    name=Kind.MISMATCH,
    interactive=True,
    config=MismatchJobConfig,
    result=MismatchReport,
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
    name=Kind.SENSITIVITY,
    config=SensitivityJobConfig,
    result=SensitivityReport,
    entry="workers.science.sensitivity:run_sensitivity",
    queue="gpu",
    time_limit_s=8 * 3600,
    example=lambda student: {"model": student, "rollout": _FP8_W_KV, "prompts": 64, "max_new_tokens": 16,
                             "target": 2.0},
    formatter=format_sensitivity,
))
register(JobKind(
    name=Kind.DRIFT,
    interactive=True,
    config=DriftJobConfig,
    result=DriftReport,
    entry="workers.science.drift:run_drift",
    queue="gpu",
    time_limit_s=2 * 3600,
    example=lambda student: {"model": student, "rollout": {"noise_sigma": 0.1}, "prompts": 128,
                             "max_new_tokens": 16},
    formatter=format_drift,
))
register(JobKind(
    name=Kind.TRAIN,
    preemptible=True,
    config=TrainJobConfig,
    result=TrainingResult,
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
    name=Kind.TIME_TO_QUALITY,
    config=TimeToQualityConfig,
    result=TimeToQualityResult,
    entry="workers.science.training.time_to_quality:run_time_to_quality",
    queue="gpu",
    time_limit_s=24 * 3600,
    example=lambda student: {"model": student, "teacher": str(Path(student).parent / "teacher"), "method": "opd",
                             "target": 0.5, "seeds": 3, "steps": 200, "eval_every": 5, "device": "auto"},
    formatter=format_time_to_quality,
))
register(JobKind(
    name=Kind.NOISE_SOLVE,
    config=NoiseSolveJobConfig,
    result=NoiseSolveResult,
    entry="workers.science.budget.noise:run_noise_solve",
    queue="gpu",
    time_limit_s=2 * 3600,
    resumable=True,  # measuring again is harmless (the BF16 reference is cached)
    max_attempts=3,
    example=lambda student: {"model": student, "target_multiple": 100.0, "prompts": 128},
    formatter=format_noise_solve,
))
register(JobKind(
    name=Kind.CALIBRATION,
    config=CalibrationJobConfig,
    result=CalibrationResult,
    entry="workers.science.budget.calibration:run_calibration",
    queue="cpu",  # it only waits for its children (gpu queue) and does the arithmetic
    time_limit_s=48 * 3600,
    resumable=True,
    max_attempts=3,
    # Sized to decide (docs/benchmarks/example-path.md): 100 steps of 256 take the toy student 38 -> 95.6 % held-out on
    # every seed, so the seeds agree to the problem and a 1.4-point drop can be told apart on 1,000 problems
    # (150 steps of 8 spread the seeds over 66-81 %: no level could be decided).  The ladder starts at 100x so a
    # budget that stands clears the FP8 presets' multiples on the toy (12.7x-56x); one extension, one bisection.
    example=lambda student: {"model": student, "teacher": str(Path(student).parent / "teacher"), "method": "opd",
                             "loss": "full", "steps": 100, "batch_size": 256, "eval_prompts": 1000,
                             "levels": [100.0, 1000.0], "seeds": 3, "max_seeds": 8, "max_extensions": 1,
                             "max_bisections": 1, "device": "auto"},
    formatter=format_calibration,
    cli_name="calibrate",
))
register(JobKind(
    name=Kind.ADMISSION,
    interactive=True,
    config=AdmissionJobConfig,
    result=AdmissionVerdict,
    entry="workers.science.budget.admission:run_admission",
    queue="gpu",
    time_limit_s=2 * 3600,
    example=lambda student: {"model": student, "rollout": _FP8_W_KV, "prompts": 128, "max_new_tokens": 16},
    formatter=format_admission,
    cli_name="admit",
))


register(JobKind(
    name=Kind.DESCRIBE,
    interactive=True,
    config=DescribeConfig,
    result=CheckpointDescription,
    entry="workers.science.checkpoints.describe:run_describe",
    queue="cpu",
    time_limit_s=3600,
    max_attempts=3,
    example=lambda student: {"model": student},
))

__all__ = ["KINDS", "CliOption", "JobKind", "MalformedResult", "UnknownJobKind", "get_kind", "register"]
