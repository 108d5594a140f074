"""The ``calibration`` job: a checkpoint's mismatch budget for one training method.

1. For each target multiple of the ladder, a ``noise-solve`` child finds the weight-noise
   sigma that realises it and measures the multiple actually achieved (with its CI) on the
   budget's metric and unit engine.
2. Equal-step ``train`` children: a BF16 baseline and one run per level (rollout noise at
   the solved sigma), ``seeds`` seeds each; a run's accuracy is its final held-out accuracy.
3. :func:`~workers.science.budget.arithmetic.find_budget` turns the curve into the budget.
   A ladder that does not bracket it gets one more level beyond its end (``extend_factor``),
   at most ``max_extensions`` times; then every level passing is reported as *not reached*,
   and a lowest level that still fails is refused.

The children are jobs of their own in the product (several workers share a calibration) and
run in this process from the command line (:mod:`workers.science.children`).  Traces:
``calibration/multiple`` and ``calibration/accuracy`` per level index (0 = the baseline)
as each level completes, so the curve fills in live.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..children import ChildJob, run_children
from ..config import ConfigError
from ..fingerprint import checkpoint_digest
from ..kinds import Kind
from ..reporting import NullReporter, Reporter
from ..training.results import TrainingResult
from .arithmetic import Budget, Level, LevelJudgement, extend_ladder, find_budget, mean
from .config import CalibrationJobConfig
from .results import CalibrationResult, NoiseSolveResult


def _noise_child(cfg: CalibrationJobConfig, target: float) -> ChildJob:
    config = {"model": cfg.model, "rollout": cfg.rollout.model_dump(mode="json"), "task": cfg.task,
              "prompts": cfg.measure_prompts, "max_new_tokens": cfg.max_new_tokens, "seed": cfg.seed,
              "metric": cfg.metric, "reference_engine": cfg.reference_engine, "target_multiple": target,
              "rel_tolerance": cfg.noise_rel_tolerance, "device": cfg.device, "threads": cfg.threads}
    return ChildJob(f"noise-{target:g}", Kind.NOISE_SOLVE, config, f"noise sigma for {target:g}x")


def _train_child(cfg: CalibrationJobConfig, name: str, sigma: float, seed_index: int) -> ChildJob:
    rollout = cfg.rollout.model_copy(update={"noise_sigma": sigma})
    config = cfg.training_config(rollout=rollout.model_dump(mode="json"), seed=cfg.seed + seed_index,
                                 eval_every=0, checkpoint_every=0)
    return ChildJob(f"train-{name}-s{seed_index}", Kind.TRAIN, config, f"train {name} seed {seed_index}")


def checkpoint_step(model: str) -> int:
    """The training step a checkpoint was saved at (its trainer state), 0 for a base model."""
    state = Path(model) / "trainer_state.json"
    try:
        return int(json.loads(state.read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def run_calibration(cfg: CalibrationJobConfig, reporter: Reporter | None = None) -> CalibrationResult:
    """The budget of ``cfg.model`` for ``cfg``'s training method (the module docstring)."""
    reporter = reporter or NullReporter()
    targets = list(cfg.levels)
    solved: dict[float, NoiseSolveResult] = {}
    accuracies: dict[str, list[float]] = {}
    extensions = 0
    while True:
        new = [t for t in targets if t not in solved]
        for child, noise in run_children(reporter, [_noise_child(cfg, t) for t in new]):
            solved[child.config["target_multiple"]] = noise
        _train_levels(cfg, reporter, new, solved, accuracies, targets)
        budget = find_budget(accuracies["baseline"], [_level(t, solved[t], accuracies) for t in targets],
                             cfg.tolerance, cfg.seed_z)
        more = extend_ladder(targets, budget.status, cfg.extend_factor)
        if not more or extensions >= cfg.max_extensions:
            break
        extensions += 1
        targets = sorted(targets + more)
    if budget.status == "below_ladder":
        raise ConfigError(f"the lowest level ({min(targets):g}x) still drops accuracy beyond {cfg.tolerance:g} points "
                          f"after {extensions} extension(s) of the ladder; start the ladder lower")
    reporter.progress(1.0, "budget not reached" if budget.status == "not_reached" else f"budget {budget.budget:.3g}x")
    return _result(cfg, budget, solved, accuracies, targets, extensions)


def _train_levels(cfg: CalibrationJobConfig, reporter: Reporter, new: list[float],
                  solved: dict[float, NoiseSolveResult], accuracies: dict[str, list[float]],
                  targets: list[float]) -> None:
    """Train the baseline (once) and each new level's seeds; their final accuracies into ``accuracies``."""
    runs = [_train_child(cfg, "baseline", 0.0, s) for s in range(cfg.seeds) if "baseline" not in accuracies]
    runs += [_train_child(cfg, f"{t:g}x", solved[t].sigma, s) for t in new for s in range(cfg.seeds)]
    for done, (child, trained) in enumerate(run_children(reporter, runs), 1):
        accuracy = _final_accuracy(child, trained)
        name = child.key.rsplit("-s", 1)[0].removeprefix("train-")
        accuracies.setdefault(name, []).append(accuracy)
        _trace_level(reporter, cfg, name, accuracies, solved, targets)
        reporter.progress(min(0.99, done / max(1, len(runs))), f"{child.label}: accuracy {accuracy:.1%}")


def _final_accuracy(child: ChildJob, trained: TrainingResult) -> float:
    if trained.final_accuracy is None:
        raise ConfigError(f"{child.label}: the run evaluated nothing, so it has no final accuracy")
    return trained.final_accuracy


def _level(target: float, noise: NoiseSolveResult, accuracies: dict[str, list[float]]) -> Level:
    ci = noise.multiple_ci
    return Level(target, noise.multiple, tuple(accuracies[f"{target:g}x"]),
                 (float(ci[0]), float(ci[1])) if ci and ci[0] is not None and ci[1] is not None else None,
                 {"noise_sigma": noise.sigma, "noise_seed": noise.noise_seed})


def _result(cfg: CalibrationJobConfig, budget: Budget, solved: dict[float, NoiseSolveResult],
            accuracies: dict[str, list[float]], targets: list[float], extensions: int) -> CalibrationResult:
    first = solved[targets[0]]
    return CalibrationResult(
        checkpoint=cfg.model, checkpoint_hash=checkpoint_digest(cfg.model), teacher=cfg.teacher,
        task=first.task, method=cfg.method_label(), metric=cfg.metric,
        unit_engine=first.unit.engine, reference_value=first.reference_value,
        step=checkpoint_step(cfg.model), steps=cfg.steps, seeds=cfg.seeds, tolerance=cfg.tolerance,
        seed_z=cfg.seed_z, budget=budget.budget, status=budget.status,
        bracket=budget.bracket, extensions=extensions,
        baseline={"accuracies": accuracies["baseline"], "mean": budget.baseline_mean, "sd": budget.baseline_sd},
        curve=[_curve_row(j) for j in budget.levels],
        noise=[{"target": t, **solved[t].model_dump(mode="json", include=_NOISE_KEYS)} for t in targets],
        rule=("a level is within tolerance when its mean accuracy drop is at most the tolerance plus seed_z "
              "standard errors of the seeds' spread; the budget is the measured multiple of the highest level "
              "with every level up to it within tolerance"),
    )


_NOISE_KEYS = {"sigma", "multiple", "multiple_ci", "trials"}


def _curve_row(j: LevelJudgement) -> dict:
    return {"target": j.target, "multiple": j.multiple, "multiple_ci": list(j.multiple_ci) if j.multiple_ci else None,
            "setting": j.setting, "accuracies": list(j.accuracies), "accuracy_mean": j.accuracy_mean,
            "accuracy_sd": j.accuracy_sd, "drop_points": j.drop_points, "allowance_points": j.allowance_points,
            "within": j.within}


def _trace_level(reporter: Reporter, cfg: CalibrationJobConfig, name: str, accuracies: dict[str, list[float]],
                 solved: dict[float, NoiseSolveResult], targets: list[float]) -> None:
    """One point per level once all its seeds are in: x is the level's index (0 = baseline)."""
    if len(accuracies[name]) < cfg.seeds:
        return
    if name == "baseline":
        reporter.log(0, {"calibration/multiple": 1.0, "calibration/accuracy": mean(accuracies[name])})
        return
    target = next(t for t in targets if f"{t:g}x" == name)
    reporter.log(targets.index(target) + 1, {"calibration/multiple": solved[target].multiple,
                                             "calibration/accuracy": mean(accuracies[name])})
