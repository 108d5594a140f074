"""The typed results of the training kinds (``train``, ``time-to-quality``): pydantic and
the standard library only, so the web process reads stored results with them."""
from __future__ import annotations

from typing import Any

from ..results import JobResult, Number


class AccuracyAt(JobResult):
    """A held-out evaluation: the accuracy (0-1) after ``step`` updates."""

    step: int
    accuracy: float


class TrainingResult(JobResult):
    """The ``train`` job: accuracies along the run, the checkpoint it saved, the time split."""

    method: str
    model: str
    task: str
    steps: int
    start_accuracy: float | None
    final_accuracy: float | None
    evals: list[AccuracyAt]
    checkpoint: str | None
    k3_reference: float | None
    time: dict[str, Number]
    tokens: int
    async_k: int
    admission: dict[str, Any] | None


class TimeToQualityResult(JobResult):
    """The ``time-to-quality`` job: per arm, times to the target and speed-ups over the first arm."""

    target: float
    method: str
    seeds: int
    baseline: str
    arms: list[dict[str, Any]]


__all__ = ["AccuracyAt", "TimeToQualityResult", "TrainingResult"]
