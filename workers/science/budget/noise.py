"""Solving the weight-noise sigma that realises a target multiple.

A calibration injects mismatch as Gaussian weight noise (sigma relative to each tensor's
RMS).  The multiple it causes is measured, not assumed: :func:`solve_sigma` measures the
multiple at a trial sigma, steps in log-log space (k3 grows about as sigma^2 for small
sigma, so the first step assumes slope 2; later steps use the secant slope of the two
nearest measurements, kept within [0.5, 4]) and stops once the target lies inside the
measured multiple's CI, or within ``rel_tolerance`` of the measured value.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ..config import ConfigError
from ..reporting import NullReporter, Reporter

Measure = Callable[[float], tuple[float | None, list[float] | None, dict]]


@dataclass(frozen=True)
class Trial:
    sigma: float
    multiple: float
    ci: tuple[float, float] | None


def _off_by(trial: Trial, target: float) -> float:
    """How far the trial's multiple is from the target, as a log ratio."""
    return abs(math.log(trial.multiple / target))


def next_sigma(trials: list[Trial], target: float) -> float:
    """The next sigma to try: a log-log secant through the two trials nearest the target
    (slope 2 from a single trial), the slope clamped to [0.5, 4]."""
    near = sorted(trials, key=lambda t: abs(math.log(t.multiple / target)))[:2]
    slope = 2.0
    if len(near) == 2 and near[0].sigma != near[1].sigma and near[0].multiple != near[1].multiple:
        slope = (math.log(near[0].multiple) - math.log(near[1].multiple)) / (math.log(near[0].sigma) - math.log(near[1].sigma))
        slope = min(4.0, max(0.5, slope))
    best = near[0]
    return best.sigma * (target / best.multiple) ** (1.0 / slope)


def solve_sigma(measure: Measure, target: float, start_sigma: float = 0.01, rel_tolerance: float = 0.15,
                max_iterations: int = 8, on_trial: Callable[[int, Trial], None] | None = None) -> tuple[Trial, list[Trial], dict]:
    """The trial that hits ``target`` (see the module docstring), every trial, and the
    report of the hitting measurement; raises :class:`ConfigError` when none hits."""
    if target <= 1.0:
        raise ConfigError(f"target multiple {target:g} is not above the BF16 engine's own (1x); noise can only add mismatch")
    trials: list[Trial] = []
    reports: dict[Trial, dict] = {}
    sigma = start_sigma
    for i in range(max_iterations):
        value, ci, report = measure(sigma)
        if value is None or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"noise sigma {sigma:.3g} gave no finite multiple; the BF16 reference may be zero")
        trial = Trial(sigma, float(value), tuple(ci) if ci else None)
        trials.append(trial)
        if on_trial is not None:
            on_trial(i, trial)
        reports[trial] = report
        if _off_by(trial, target) <= math.log1p(rel_tolerance):
            return trial, trials, report
        sigma = next_sigma(trials, target)
        if not (0 < sigma <= 100.0):
            break
    best = min(trials, key=lambda t: _off_by(t, target))
    if _off_by(best, target) <= math.log(2.0):  # measurement noise kept it from the tolerance: the closest will do
        return best, trials, reports[best]
    raise ConfigError(f"noise sigma did not reach {target:g}x within {len(trials)} measurements (closest: sigma "
                      f"{best.sigma:.3g} gave {best.multiple:.3g}x); widen rel_tolerance or change the ladder")


def run_noise_solve(cfg, reporter: Reporter | None = None) -> dict:
    """The ``noise-solve`` job: the sigma realising ``cfg.target_multiple`` on ``cfg.model``."""
    from ..mismatch import run_mismatch

    reporter = reporter or NullReporter()
    base = cfg.measurement()
    if base.rollout.noise_sigma:
        raise ConfigError("rollout.noise_sigma is what noise-solve finds; leave it 0")

    class Quiet(NullReporter):
        def should_stop(self) -> bool:
            return reporter.should_stop()

    def measure(sigma: float):
        rollout = base.rollout.model_copy(update={"noise_sigma": sigma, "noise_seed": cfg.noise_seed})
        report = run_mismatch(base.model_copy(update={"rollout": rollout}), Quiet())
        return report["multiple"], report["multiple_ci"], report

    def on_trial(i: int, t: Trial) -> None:
        reporter.log(i + 1, {"noise/sigma": t.sigma, "noise/multiple": t.multiple})
        reporter.progress((i + 1) / cfg.max_iterations, f"sigma {t.sigma:.3g} gives {t.multiple:.3g}x")

    hit, trials, report = solve_sigma(measure, cfg.target_multiple, cfg.start_sigma, cfg.rel_tolerance,
                                      cfg.max_iterations, on_trial)
    reporter.progress(1.0, "done")
    return {
        "target_multiple": cfg.target_multiple, "sigma": hit.sigma, "noise_seed": cfg.noise_seed,
        "multiple": hit.multiple, "multiple_ci": list(hit.ci) if hit.ci else None,
        "trials": [{"sigma": t.sigma, "multiple": t.multiple, "ci": list(t.ci) if t.ci else None} for t in trials],
        "metric": report["metric"], "reference_value": report["reference_value"], "unit": report["unit"],
        "task": report["task"], "model": report["model"], "prompts": report["prompts"],
    }

