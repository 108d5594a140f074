"""Time to quality: how long each training config takes to reach a target accuracy.

Every arm (rollout config + staleness) trains from the same student with seeds
0..seeds-1; a run stops at the first evaluation that reaches ``target``.  Its time to
target is the sum of its step times up to that evaluation (evaluation itself excluded),
*measured* (passes run one after the other on one device) and *modelled* (with async_k >= 1
the rollout overlapping the teacher and update passes, ``time/step_overlapped_s``).  The
speed-up of an arm is ``time(baseline) / time(arm)`` per seed (seeds paired), reported as
mean and spread; a run that never reached the target has no time, and its seed pair no ratio.
"""
from __future__ import annotations

import statistics
from typing import Mapping

from ..reporting import Cancelled, Reporter
from .config import TimeToQualityConfig
from .job import trainer_for
from .results import TimeToQualityResult


class _RunClock:
    """Forwards a run's trace under a prefix, adds up its step times, and asks the trainer
    to stop once an evaluation reaches the target (or when the job is cancelled)."""

    def __init__(self, outer: Reporter, prefix: str, target: float) -> None:
        self.outer, self.prefix, self.target = outer, prefix, target
        self.measured = self.modelled = 0.0
        self.reached: dict | None = None

    def log(self, step: int, values: Mapping[str, float]) -> None:
        self.measured += values.get("time/step_s", 0.0)
        self.modelled += values.get("time/step_overlapped_s", 0.0)
        if "eval/accuracy" in values and self.reached is None and values["eval/accuracy"] >= self.target:
            self.reached = {"step": step, "accuracy": values["eval/accuracy"], "measured_s": self.measured,
                            "modelled_s": self.modelled}
        keep = {k: v for k, v in values.items() if k in ("eval/accuracy", "train/loss", "mismatch/k3")}
        if keep:
            self.outer.log(step, {f"{self.prefix}/{k}": v for k, v in keep.items()})

    def progress(self, frac: float, message: str = "") -> None:
        pass

    def flush(self) -> None:
        self.outer.flush()

    def should_stop(self) -> bool:
        return self.reached is not None or self.outer.should_stop()


def _spread(values: list[float]) -> dict:
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n": len(values)}


def run_time_to_quality(config: TimeToQualityConfig, reporter: Reporter) -> TimeToQualityResult:
    """Train every arm with every seed to the target; times, reached fractions and speed-ups."""
    # Every run's config is built (and so checked) before the first one trains.
    trainers_cfgs = [(arm, seed, config.run_config(arm, seed)) for arm in config.arms for seed in range(config.seeds)]
    runs: dict[str, list[dict]] = {arm.name: [] for arm in config.arms}
    for i, (arm, seed, cfg) in enumerate(trainers_cfgs):
        clock = _RunClock(reporter, f"{arm.name}/seed{seed}", config.target)
        trainer = trainer_for(cfg, clock)
        try:
            report = trainer.train()
            final = report.final_accuracy
        except Cancelled:
            if clock.reached is None:
                raise
            final = clock.reached["accuracy"]
        runs[arm.name].append({"seed": seed, "reached": clock.reached, "final_accuracy": final,
                               "start_accuracy": trainer.evals[0][1] if trainer.evals else None})
        reporter.progress((i + 1) / len(trainers_cfgs), f"{arm.name} seed {seed}")
    base = config.arms[0].name
    arms = []
    for arm in config.arms:
        row = {"name": arm.name, "async_k": arm.async_k, "rollout": arm.rollout.model_dump(mode="json"),
               "runs": runs[arm.name],
               "reached_fraction": sum(r["reached"] is not None for r in runs[arm.name]) / config.seeds}
        for clock_name in ("measured_s", "modelled_s"):
            times = [r["reached"][clock_name] for r in runs[arm.name] if r["reached"]]
            ratios = [b["reached"][clock_name] / r["reached"][clock_name]
                      for b, r in zip(runs[base], runs[arm.name], strict=False) if b["reached"] and r["reached"]]
            row[clock_name] = _spread(times)
            row[f"speedup_{clock_name.removesuffix('_s')}"] = _spread(ratios)
        arms.append(row)
    return TimeToQualityResult(target=config.target, method=config.method, seeds=config.seeds, baseline=base, arms=arms)
