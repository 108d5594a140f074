"""The ``calibration`` job: a checkpoint's mismatch budget for one training method.

1. For each target multiple of the ladder, a ``noise-solve`` child finds the weight-noise
   sigma that realises it and measures the multiple actually achieved (with its CI) on the
   budget's metric and unit engine; meanwhile the BF16 baseline trains ``seeds`` seeds.
2. The baseline must have learned (:func:`~.arithmetic.learning`): while its mean gain over
   the starting checkpoint clears the required margin but the lower end of its interval does
   not (too few seeds, not too little learning), it gets one more seed at a time up to
   ``max_seeds``; if the gain is still not shown the calibration ends ``uninformative``,
   naming which of the two it was and what to change, and no budget is stored.
3. Equal-step ``train`` children at each level (rollout noise at the solved sigma), ``seeds``
   seeds each; a run's accuracy is its final held-out accuracy.
   The ladder's noise is re-drawn every step or drawn once per run (``noise_draw``: the
   budget's ``source``); each seed draws its own.
4. :func:`~.arithmetic.find_budget` judges the curve by the strict rule, and the ladder
   grows until it decides: the lowest level that is not within, while *inconclusive*, gets
   one more seed (and the baseline with it) up to ``max_seeds``; a ladder that does not
   bracket the budget gets a level beyond its end (``extend_factor``, at most
   ``max_extensions`` times); a bracket wider than ``resolution`` is bisected in log multiple
   (at most ``max_bisections`` levels).  Then every level within is reported as *not
   reached*; a lowest level still not within stores no budget and says why in words:
   ``undecided`` (inconclusive at ``max_seeds``: the seeds' spread against the tolerance, and
   the seeds that would decide) or ``below_ladder`` (shown beyond: start lower).
5. The transfer check (``transfer``): each deployed source (a quantized rollout config, a
   staleness ``async_k``) is measured (a ``mismatch`` child), noise is solved to the same
   multiple, and equal-step runs train with the source itself, with that noise re-drawn and
   with it persistent; each noise draw *agrees* with the source when the interval of their
   accuracy difference lies within the tolerance (:func:`~.arithmetic.judge_agreement`).
   The budget lists the sources its own draw agreed with (``shown_to_transfer``).

The children are jobs of their own in the product (several workers share a calibration) and
run in this process from the command line (:mod:`workers.science.children`).  The same
results give the same next children, so a parent restarted after a worker loss asks for the
children it already has.  Traces: ``calibration/multiple`` and ``calibration/accuracy`` per
level, at the order the level was added (0 = the baseline), once its first seeds are in, so
the curve fills in live.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..children import ChildJob, run_children
from ..config import MAX_SEED, ConfigError, RolloutConfig
from ..fingerprint import checkpoint_digest
from ..kinds import Kind
from ..reporting import GrowingPlan, NullReporter, Reporter
from ..results import MismatchReport
from ..training.results import TrainingResult
from .arithmetic import (
    Budget,
    Learning,
    Level,
    LevelJudgement,
    bisect_target,
    difference_interval,
    extend_ladder,
    find_budget,
    judge_agreement,
    learning,
    mean,
    sample_sd,
    seeds_to_decide,
)
from .config import CalibrationJobConfig, TransferSource
from .results import CalibrationResult, Learned, NoiseSolveResult, TransferRow

NOISE_DRAWS = ("redrawn", "persistent")


def _measurement(cfg: CalibrationJobConfig, rollout: RolloutConfig) -> dict:
    """A multiple measurement of ``rollout`` on the calibrated checkpoint, in the budget's metric and unit pair."""
    return {"model": cfg.model, "rollout": rollout.model_dump(mode="json"), "task": cfg.task,
            "prompts": cfg.measure_prompts, "max_new_tokens": cfg.max_new_tokens, "seed": cfg.seed,
            "metric": cfg.metric, "reference_engine": cfg.reference_engine, "trainer_dtype": cfg.unit_trainer,
            "device": cfg.device, "threads": cfg.threads}


def _noise_child(cfg: CalibrationJobConfig, target: float) -> ChildJob:
    config = {**_measurement(cfg, cfg.rollout), "target_multiple": target, "rel_tolerance": cfg.noise_rel_tolerance}
    return ChildJob(f"noise-{target:g}", Kind.NOISE_SOLVE, config, f"noise sigma for {target:g}x")


def _measure_child(cfg: CalibrationJobConfig, source: TransferSource) -> ChildJob:
    """The multiple of a deployed source on the checkpoint (staleness read off its snapshot ring)."""
    config = _measurement(cfg, source.rollout.model_copy(update={"staleness": source.async_k}))
    return ChildJob(f"measure-{source.name}", Kind.MISMATCH, config, f"multiple of {source.name}")


def _train_child(cfg: CalibrationJobConfig, name: str, sigma: float, seed_index: int,
                 noise_draw: str | None = None, source: TransferSource | None = None) -> ChildJob:
    """One training run: at noise ``sigma`` (each seed its own draw), or under a deployed source."""
    extra: dict[str, Any]
    if source is not None:
        rollout, extra = source.rollout, {"async_k": source.async_k}
    else:
        rollout = cfg.rollout.model_copy(update={"noise_sigma": sigma,
                                                 "noise_seed": (cfg.rollout.noise_seed + seed_index) % MAX_SEED})
        extra = {"noise_draw": noise_draw or cfg.noise_draw}
    config = cfg.training_config(rollout=rollout.model_dump(mode="json"), seed=cfg.seed + seed_index,
                                 eval_every=0, checkpoint_every=0, **extra)
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
    ladder = _Ladder(cfg, reporter or NullReporter())
    ladder.run([_noise_child(cfg, t) for t in cfg.levels] + ladder.seed_children("baseline", 0.0, cfg.seeds))
    ladder.order = list(cfg.levels)
    learned = ladder.learned()
    # Too few seeds is not too little learning: while the mean gain clears the requirement but
    # its interval's lower end does not, the baseline gets one more seed at a time (max_seeds).
    while not learned.informative and learned.gain_points > learned.required_points and learned.seeds < cfg.max_seeds:
        ladder.run(ladder.seed_children("baseline", 0.0, learned.seeds + 1))
        learned = ladder.learned()
    if not learned.informative:
        ladder.reporter.progress(1.0, "uninformative: " + ("the BF16 baseline's seeds spread too much"
                                                           if _spread_too_much(learned) else
                                                           "the BF16 baseline did not learn"))
        return _uninformative(cfg, ladder, learned)
    ladder.run([c for t in cfg.levels for c in ladder.seed_children(f"{t:g}x", ladder.solved[t].sigma, cfg.seeds)])
    extensions = bisections = 0
    while True:
        budget = ladder.budget()
        deciding = budget.deciding
        if (deciding is not None and deciding.judgement == "inconclusive"
                and len(deciding.accuracies) < cfg.max_seeds):
            ladder.add_seed(deciding.target)
            continue
        more = extend_ladder(ladder.order, budget.status, cfg.extend_factor)
        if more and extensions < cfg.max_extensions:
            extensions += 1
            ladder.add_levels(more)
            continue
        middle = bisect_target(budget.bracket, cfg.resolution) if budget.status == "reached" else None
        if middle is not None and middle not in ladder.order and bisections < cfg.max_bisections:
            bisections += 1
            ladder.add_levels([middle])
            continue
        break
    if budget.status == "below_ladder":
        undecided = budget.levels[0].judgement == "inconclusive"
        words = (_undecided_words if undecided else _harmful_words)(cfg, budget, extensions)
        ladder.reporter.progress(1.0, words.split(":", 1)[0])
        return _no_budget(cfg, ladder, budget, "undecided" if undecided else "below_ladder", extensions, bisections,
                          words)
    transfer = _transfer_check(cfg, ladder) if cfg.transfer else []
    ladder.reporter.progress(1.0, "budget not reached" if budget.status == "not_reached"
                             else f"budget {budget.budget:.3g}x")
    return _result(cfg, ladder, budget, ladder.learned(), extensions, bisections, transfer)


def _transfer_check(cfg: CalibrationJobConfig, ladder: "_Ladder") -> list[TransferRow]:
    """Module docstring, step 5: one row per deployed source."""
    ladder.run([_measure_child(cfg, s) for s in cfg.transfer])
    matched = {s.name: ladder.measured[f"measure-{s.name}"] for s in cfg.transfer}
    rows: list[TransferRow] = []
    # the multiple of each source that noise can match (above the unit: noise only adds mismatch)
    targets = {s.name: float(m) for s in cfg.transfer if (m := matched[s.name].multiple) is not None and m > 1.0}
    measurable = [s for s in cfg.transfer if s.name in targets]
    ladder.run([_noise_child(cfg, targets[s.name]) for s in measurable])
    runs = []
    for s in measurable:
        sigma = ladder.solved[targets[s.name]].sigma
        runs += [_train_child(cfg, f"transfer-{s.name}", 0.0, i, source=s) for i in range(cfg.seeds)]
        runs += [_train_child(cfg, f"transfer-{s.name}~{draw}", sigma, i, noise_draw=draw)
                 for draw in NOISE_DRAWS for i in range(cfg.seeds)]
    ladder.run(runs)
    for s in cfg.transfer:
        report = matched[s.name]
        ci = list(report.multiple_ci) if report.multiple_ci else None
        row: dict[str, Any] = {"name": s.name, "kind": s.kind, "async_k": s.async_k, "multiple": report.multiple,
                               "multiple_ci": ci,
                               "rollout": s.rollout.model_dump(mode="json", exclude_defaults=True)}
        if s not in measurable:
            rows.append(TransferRow(**row, message=f"{report.multiple or 0:.3g}x is not above the BF16 unit: "
                                                   "nothing to match with noise"))
            continue
        deployed = ladder.accuracies[f"transfer-{s.name}"]
        noise = ladder.solved[targets[s.name]]
        row.update(sigma=noise.sigma, noise_multiple=noise.multiple, accuracies=deployed)
        for draw in NOISE_DRAWS:
            accs = ladder.accuracies[f"transfer-{s.name}~{draw}"]
            diff, low, high = difference_interval(accs, deployed, cfg.confidence)
            row[draw] = {"accuracies": accs, "difference_points": diff, "difference_ci": [low, high],
                         "agreement": judge_agreement(low, high, cfg.tolerance)}
        rows.append(TransferRow(**row))
    return rows


class _Ladder:
    """A calibration's runs so far: the noise solved per target, the accuracies per level
    (``baseline``, ``10x``, ...), the baseline's start accuracies, and progress over every
    run planned (rounds add runs: the bar slows down, it never goes back; :class:`GrowingPlan`)."""

    def __init__(self, cfg: CalibrationJobConfig, reporter: Reporter) -> None:
        self.cfg, self.reporter = cfg, reporter
        self.order: list[float] = []  # the targets in the order they were added (a level's trace step)
        self.solved: dict[float, NoiseSolveResult] = {}
        self.measured: dict[str, MismatchReport] = {}  # a transfer source's multiple, by child key
        self.accuracies: dict[str, list[float]] = {}
        self.starts: list[float] = []
        self.plan = GrowingPlan()

    def seed_children(self, name: str, sigma: float, count: int) -> list[ChildJob]:
        have = len(self.accuracies.get(name, []))
        return [_train_child(self.cfg, name, sigma, s) for s in range(have, count)]

    def run(self, children: list[ChildJob]) -> None:
        self.plan.grow(len(children))
        for child, result in run_children(self.reporter, children):
            fraction = self.plan.finished_one()
            if child.kind == Kind.NOISE_SOLVE:
                self.solved[child.config["target_multiple"]] = result
                message = f"{child.label}: {result.multiple:.3g}x at sigma {result.sigma:.3g}"
            elif child.kind == Kind.MISMATCH:
                self.measured[child.key] = result
                message = f"{child.label}: {result.multiple or 0:.3g}x"
            else:
                accuracy = _final_accuracy(child, result)
                name = child.key.rsplit("-s", 1)[0].removeprefix("train-")
                self.accuracies.setdefault(name, []).append(accuracy)
                if name == "baseline":
                    if result.start_accuracy is None:
                        raise ConfigError(f"{child.label}: the run did not evaluate its starting checkpoint, so "
                                          "nothing shows the baseline learned")
                    self.starts.append(result.start_accuracy)
                self._trace(name)
                message = f"{child.label}: accuracy {accuracy:.1%}"
            self.reporter.progress(fraction, f"{message} (run {self.plan.done} of {self.plan.planned} planned)")

    def add_levels(self, targets: list[float]) -> None:
        self.order += targets
        self.run([_noise_child(self.cfg, t) for t in targets])
        self.run([c for t in targets for c in self.seed_children(f"{t:g}x", self.solved[t].sigma, self.cfg.seeds)])

    def add_seed(self, target: float) -> None:
        """One more seed for an inconclusive level, and for the baseline while it has fewer."""
        name = f"{target:g}x"
        count = len(self.accuracies[name]) + 1
        runs = self.seed_children(name, self.solved[target].sigma, count)
        runs += self.seed_children("baseline", 0.0, max(count, len(self.accuracies["baseline"])))
        self.run(runs)

    def budget(self) -> Budget:
        return find_budget(self.accuracies["baseline"], [self._level(t) for t in self.order], self.cfg.tolerance,
                           self.cfg.confidence)

    def learned(self) -> Learning:
        return learning(self.starts, self.accuracies["baseline"], self.cfg.required_gain, self.cfg.confidence)

    def _level(self, target: float) -> Level:
        noise = self.solved[target]
        ci = noise.multiple_ci
        return Level(target, noise.multiple, tuple(self.accuracies[f"{target:g}x"]),
                     (float(ci[0]), float(ci[1])) if ci and ci[0] is not None and ci[1] is not None else None,
                     {"noise_sigma": noise.sigma, "noise_seed": noise.noise_seed})

    def _trace(self, name: str) -> None:
        """One point per level once its first seeds are in: x is the order the level was added
        in (0 = the baseline), so a bisection level does not move the others."""
        if len(self.accuracies[name]) != self.cfg.seeds or name.startswith("transfer-"):
            return
        if name == "baseline":
            self.reporter.log(0, {"calibration/multiple": 1.0, "calibration/accuracy": mean(self.accuracies[name])})
            return
        target = next(t for t in self.order if f"{t:g}x" == name)
        self.reporter.log(self.order.index(target) + 1, {"calibration/multiple": self.solved[target].multiple,
                                                         "calibration/accuracy": mean(self.accuracies[name])})


def _final_accuracy(child: ChildJob, trained: TrainingResult) -> float:
    if trained.final_accuracy is None:
        raise ConfigError(f"{child.label}: the run evaluated nothing, so it has no final accuracy")
    return trained.final_accuracy


RULE = ("a level is within budget only when the upper end of its accuracy drop's confidence interval (Welch, "
        "Student's t over the seeds) is at most the tolerance, beyond it when the lower end is above, and "
        "inconclusive in between (it gets more seeds, up to max_seeds, and still inconclusive ends the budget); the "
        "budget is the measured multiple of the highest level with every level up to it within, bisected to the "
        "stated resolution")


def _spread_too_much(learned: Learning) -> bool:
    """The baseline learned more than required on average; its seeds could not show it."""
    return learned.gain_points > learned.required_points


def _uninformative(cfg: CalibrationJobConfig, ladder: _Ladder, learned: Learning) -> CalibrationResult:
    low = "unbounded" if learned.gain_low is None else f"{learned.gain_low:.3g}"
    went = (f"the BF16 baseline went {learned.start_mean:.1%} -> {learned.final_mean:.1%} over {cfg.steps} steps "
            f"(gain {learned.gain_points:.3g} points on average over {learned.seeds} seeds, lower end {low})")
    if _spread_too_much(learned):
        message = (f"uninformative: {went}: it learned, but its seeds spread too much to show the gain beyond the "
                   f"{learned.required_points:.3g} points required, even at max_seeds ({cfg.max_seeds}), so no drop "
                   "could be told from no learning and no budget is stored. More seeds (max_seeds) or runs that "
                   "end nearer each other (more steps, a larger batch_size, more eval_prompts) would show it.")
    else:
        message = (f"uninformative: {went}, not more than the {learned.required_points:.3g} points required: the "
                   "student did not learn enough, so no drop could be told from no learning and no budget is "
                   "stored. Train longer (steps), raise lr or batch_size, or calibrate a pair whose student "
                   "learns from its teacher.")
    return CalibrationResult(**_common(cfg, ladder, learned), budget=None, status="uninformative",
                             bracket=(None, None), curve=[], extensions=0, bisections=0, message=message)


def _undecided_words(cfg: CalibrationJobConfig, budget: Budget, extensions: int) -> str:
    """Why the lowest level stays inconclusive, in the seeds' spread against the tolerance, and what would decide it."""
    lowest = budget.levels[0]
    low, high = lowest.drop_ci
    interval = "unbounded" if low is None or high is None else f"[{low:+.2f}, {high:+.2f}]"
    base_sd, level_sd = 100.0 * budget.baseline_sd, 100.0 * lowest.accuracy_sd
    needed = seeds_to_decide(base_sd, level_sd, lowest.drop_points, cfg.tolerance, cfg.confidence)
    more = (f"about {needed} seeds a side would decide it at this spread (max_seeds)" if needed is not None
            else "its mean drop is at the tolerance already, so more seeds would not show it within")
    return (f"undecided: the lowest level ({lowest.multiple:.3g}x) dropped accuracy by {lowest.drop_points:+.2f} "
            f"points, but with {len(lowest.accuracies)} seeds its {cfg.confidence:.0%} interval {interval} still "
            f"straddles the {cfg.tolerance:g}-point tolerance: the seeds' final accuracies spread too much (sd "
            f"{base_sd:.2f} points at the BF16 baseline, {level_sd:.2f} at the level) for {cfg.tolerance:g} points to "
            f"be told apart ({extensions} extension(s) of the ladder). No budget was stored. To decide it: {more}; "
            "or runs that end nearer each other (more steps, so the runs converge; a larger batch_size), "
            "a steadier accuracy (more eval_prompts), or a larger tolerance.")


def _harmful_words(cfg: CalibrationJobConfig, budget: Budget, extensions: int) -> str:
    lowest = budget.levels[0]
    low, high = lowest.drop_ci
    return (f"below the ladder: the lowest level ({lowest.multiple:.3g}x) already drops accuracy by "
            f"{lowest.drop_points:+.2f} points, interval [{low:+.2f}, {high:+.2f}], beyond the {cfg.tolerance:g}-point "
            f"tolerance after {extensions} extension(s) of the ladder. No budget was stored: start the ladder lower "
            "(levels nearer 1).")


def _no_budget(cfg: CalibrationJobConfig, ladder: _Ladder, budget: Budget, status: str, extensions: int,
               bisections: int, message: str) -> CalibrationResult:
    """A curve that shows no budget (its lowest level is not within): the curve, and the message saying why."""
    return CalibrationResult(**_common(cfg, ladder, ladder.learned()), budget=None, status=status,
                             bracket=budget.bracket, curve=[_curve_row(j) for j in budget.levels],
                             extensions=extensions, bisections=bisections, message=message)


def _result(cfg: CalibrationJobConfig, ladder: _Ladder, budget: Budget, learned: Learning, extensions: int,
            bisections: int, transfer: list[TransferRow]) -> CalibrationResult:
    shown = sorted({row.kind for row in transfer if row.agreement(cfg.noise_draw) == "agrees"})
    return CalibrationResult(**_common(cfg, ladder, learned), budget=budget.budget, status=budget.status,
                             bracket=budget.bracket, curve=[_curve_row(j) for j in budget.levels],
                             extensions=extensions, bisections=bisections, transfer=transfer,
                             shown_to_transfer=shown)


def _common(cfg: CalibrationJobConfig, ladder: _Ladder, learned: Learning) -> dict:
    first = ladder.solved[cfg.levels[0]]
    baseline = ladder.accuracies["baseline"]
    return dict(
        checkpoint=cfg.model, checkpoint_hash=checkpoint_digest(cfg.model), teacher=cfg.teacher,
        task=first.task, method=cfg.method_label(), metric=cfg.metric, source=cfg.source,
        unit_engine=first.unit.engine, unit_trainer=first.unit.trainer or "fp32", reference_value=first.reference_value,
        step=checkpoint_step(cfg.model), steps=cfg.steps, seeds=cfg.seeds, tolerance=cfg.tolerance,
        confidence=cfg.confidence, resolution=cfg.resolution,
        learning=Learned(**asdict(learned), informative=learned.informative),
        baseline={"accuracies": baseline, "mean": mean(baseline), "sd": sample_sd(baseline)},
        noise=[{"target": t, **ladder.solved[t].model_dump(mode="json", include=_NOISE_KEYS)} for t in ladder.order
               or cfg.levels],
        rule=RULE,
    )


_NOISE_KEYS = {"sigma", "multiple", "multiple_ci", "trials"}


def _curve_row(j: LevelJudgement) -> dict:
    return {"target": j.target, "multiple": j.multiple, "multiple_ci": list(j.multiple_ci) if j.multiple_ci else None,
            "setting": j.setting, "accuracies": list(j.accuracies), "accuracy_mean": j.accuracy_mean,
            "accuracy_sd": j.accuracy_sd, "drop_points": j.drop_points, "drop_ci": list(j.drop_ci),
            "judgement": j.judgement, "within": j.within}
