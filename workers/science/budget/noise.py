"""Solving the weight-noise sigma that realises a target multiple.

A calibration injects mismatch as Gaussian weight noise (sigma relative to each tensor's
RMS).  The multiple it causes is measured, not assumed: :func:`solve_sigma` measures the
multiple at trial sigmas (:func:`next_sigma` picks each: k3 grows about as sigma^2 for
small sigma, so steps start with slope 2 in log-log space, then interpolate once trials
bracket the target) and stops once the measured multiple is within ``rel_tolerance`` of
the target.  When measurement noise keeps every trial outside it, the closest trial within
a factor 2 is taken; a level's multiple is always the measured one (with its CI), never the
target.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from ..config import ConfigError
from ..reporting import NullReporter, Reporter, SubReporter
from .config import NoiseSolveJobConfig
from .results import NoiseSolveResult

Measure = Callable[[float], tuple[float | None, list[float | None] | None, Any]]


@dataclass(frozen=True)
class Trial:
    sigma: float
    multiple: float
    ci: tuple[float, float] | None


def _off_by(trial: Trial, target: float) -> float:
    """How far the trial's multiple is from the target, as a log ratio."""
    return abs(math.log(trial.multiple / target))


def next_sigma(trials: list[Trial], target: float) -> float:
    """The next sigma to try.  Once trials fall on both sides of the target: interpolate in
    log-log space between the nearest below and the nearest above (the geometric mean of the
    two when the measured multiples do not rise with sigma: noise).  Before that: a step from
    the outermost trial (largest sigma when all are below) along the log-log secant of the
    two outermost (slope 2 from one trial, or when the secant does not rise), clamped to
    [0.5, 4]."""
    below = [t for t in trials if t.multiple < target]
    above = [t for t in trials if t.multiple > target]
    if below and above:
        lo = max(below, key=lambda t: t.sigma if t.sigma < min(a.sigma for a in above) else -1.0)
        hi = min(above, key=lambda t: t.sigma)
        if lo.sigma < hi.sigma and lo.multiple < hi.multiple:
            f = (math.log(target) - math.log(lo.multiple)) / (math.log(hi.multiple) - math.log(lo.multiple))
            f = min(0.9, max(0.1, f))  # keep clear of the ends so a noisy end cannot trap the search
            return math.exp(math.log(lo.sigma) + f * (math.log(hi.sigma) - math.log(lo.sigma)))
        return math.sqrt(lo.sigma * hi.sigma) if lo.sigma != hi.sigma else hi.sigma * 0.5
    # all on one side: step on from the outermost trial (the largest sigma when all are
    # below, the smallest when all are above), so every step moves the search
    ordered = sorted(trials, key=lambda t: t.sigma, reverse=bool(below))
    edge, slope = ordered[0], 2.0
    if len(ordered) >= 2 and ordered[1].sigma != edge.sigma and ordered[1].multiple != edge.multiple:
        rise = math.log(edge.multiple) - math.log(ordered[1].multiple)
        secant = rise / (math.log(edge.sigma) - math.log(ordered[1].sigma))
        if secant > 0:
            slope = min(4.0, max(0.5, secant))
    return edge.sigma * (target / edge.multiple) ** (1.0 / slope)


def solve_sigma(measure: Measure, target: float, start_sigma: float = 0.01, rel_tolerance: float = 0.15,
                max_iterations: int = 8, on_trial: Callable[[int, Trial], None] | None = None,
                ) -> tuple[Trial, list[Trial], Any]:
    """The trial that hits ``target`` (see the module docstring), every trial, and the
    report of the hitting measurement; raises :class:`ConfigError` when none hits."""
    if target <= 1.0:
        raise ConfigError(f"target multiple {target:g} is not above the BF16 engine's own (1x); noise can only add "
                          "mismatch")
    trials: list[Trial] = []
    reports: dict[Trial, Any] = {}
    sigma = start_sigma
    for i in range(max_iterations):
        value, ci, report = measure(sigma)
        if value is None or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"noise sigma {sigma:.3g} gave no finite multiple; the BF16 reference may be zero")
        trial = Trial(sigma, float(value), (ci[0], ci[1]) if ci and ci[0] is not None and ci[1] is not None else None)
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
                      f"{best.sigma:.3g} gave {best.multiple:.3g}x; tried "
                      + ", ".join(f"{t.sigma:.3g} -> {t.multiple:.3g}x" for t in trials)
                      + "); widen rel_tolerance, measure more prompts or change the ladder")


def run_noise_solve(cfg: NoiseSolveJobConfig, reporter: Reporter | None = None) -> NoiseSolveResult:
    """The ``noise-solve`` job: the sigma realising ``cfg.target_multiple`` on ``cfg.model``."""
    from ..mismatch import run_mismatch

    reporter = reporter or NullReporter()
    base = cfg.measurement()
    if base.rollout.noise_sigma:
        raise ConfigError("rollout.noise_sigma is what noise-solve finds; leave it 0")

    def measure(sigma: float):
        rollout = base.rollout.model_copy(update={"noise_sigma": sigma, "noise_seed": cfg.noise_seed})
        report = run_mismatch(base.model_copy(update={"rollout": rollout}), SubReporter(reporter))
        return report.multiple, report.multiple_ci, report

    def on_trial(i: int, t: Trial) -> None:
        reporter.log(i + 1, {"noise/sigma": t.sigma, "noise/multiple": t.multiple})
        reporter.progress((i + 1) / cfg.max_iterations, f"sigma {t.sigma:.3g} gives {t.multiple:.3g}x")

    hit, trials, report = solve_sigma(measure, cfg.target_multiple, cfg.start_sigma, cfg.rel_tolerance,
                                      cfg.max_iterations, on_trial)
    reporter.progress(1.0, "done")
    return NoiseSolveResult(
        target_multiple=cfg.target_multiple, sigma=hit.sigma, noise_seed=cfg.noise_seed,
        multiple=hit.multiple, multiple_ci=list(hit.ci) if hit.ci else None,
        trials=[{"sigma": t.sigma, "multiple": t.multiple, "ci": list(t.ci) if t.ci else None} for t in trials],
        metric=report.metric, reference_value=report.reference_value, unit=report.unit,
        task=report.task, model=report.model, prompts=report.prompts,
    )

