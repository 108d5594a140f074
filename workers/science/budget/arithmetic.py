"""The arithmetic of a mismatch budget: from a calibration curve to the budget, and from a
measured multiple to an admission verdict.  Pure Python (no torch, no numpy): the web
process imports it to explain a verdict.

**The budget rule (strict).**  A calibration trains equal-step runs at a ladder of mismatch
levels, several seeds each, plus a BF16 baseline.  A level's *drop* is the baseline's mean
held-out accuracy minus the level's mean (in points), with a two-sided ``confidence``
interval (95% by default) from the seeds: Welch's interval, Student's t on the
Welch-Satterthwaite degrees of freedom, so two seeds give a wide one (t = 12.7 at one degree
of freedom).  A level is

- ``within`` when the interval's *upper* end is at most the tolerance,
- ``beyond`` when its lower end is above the tolerance,
- ``inconclusive`` when the interval straddles (or touches) it; the calibration then gives the
  level and the baseline more seeds, up to a cap, before it counts.

So a noisier level can only turn ``within`` into ``inconclusive``, never the reverse: noise
makes the budget smaller or undecided, never larger.  Where one side has a single seed its
spread is taken to be the other side's (the same recipe, another seed); with a single seed
on both sides the interval is unbounded and the level inconclusive.

The **budget** is the measured multiple of the highest level such that it and every level
below it are within (the first level that is not ends it, and a pass above it is noise, not
tolerance).  Its bracket is (that level, the first level not within).  When every level is
within the budget is *not reached* (it is at least the top level); when the lowest level is
not within, the ladder does not bracket from below.  Between the bracket's ends the
calibration bisects in log multiple (:func:`bisect_target`) to a stated resolution.

**Learning.**  A budget says how much mismatch a method tolerates before it learns less, so
it exists only where the BF16 baseline learns: :func:`learning` requires the lower end of the
baseline's gain over the starting checkpoint (paired per seed) to exceed a margin (the
tolerance by default); otherwise the calibration is *uninformative* and stores no budget.

**The verdict** of a measured multiple against the budget is :func:`workers.science.verdicts.decide`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Sequence

from ..verdicts import BudgetStatus
from .student_t import two_sided

Judgement = Literal["within", "beyond", "inconclusive"]


def ladder(start: float, factor: float, count: int) -> list[float]:
    """A geometric ladder of target multiples: start, start*factor, ... (``count`` levels)."""
    if start <= 0 or factor <= 1 or count < 1:
        raise ValueError("a ladder needs start > 0, factor > 1 and at least one level")
    return [start * factor**i for i in range(count)]


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def sample_sd(xs: Sequence[float]) -> float:
    """Sample standard deviation (n - 1); 0 for a single value."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def difference_interval(a: Sequence[float], b: Sequence[float],
                        confidence: float) -> tuple[float, float | None, float | None]:
    """mean(a) - mean(b) in points (inputs are fractions) with its Welch ``confidence``
    interval; the ends are None (unbounded) when both sides have a single value."""
    diff = 100.0 * (mean(a) - mean(b))
    na, nb = len(a), len(b)
    if na < 2 and nb < 2:
        return diff, None, None
    sa, sb = sample_sd(a), sample_sd(b)
    if na < 2:  # one seed: its spread is taken to be the other side's
        sa, df = sb, nb - 1.0
    elif nb < 2:
        sb, df = sa, na - 1.0
    va, vb = sa**2 / na, sb**2 / nb
    if va + vb == 0.0:
        return diff, diff, diff
    if na >= 2 and nb >= 2:
        df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    half = 100.0 * two_sided(confidence, df) * math.sqrt(va + vb)
    return diff, diff - half, diff + half


def judge_drop(low: float | None, high: float | None, tolerance_points: float) -> Judgement:
    """The strict rule on one level's drop interval (the module docstring)."""
    if high is not None and high <= tolerance_points:
        return "within"
    if low is not None and low > tolerance_points:
        return "beyond"
    return "inconclusive"


@dataclass(frozen=True)
class Level:
    """One rung of the ladder: the multiple it was meant to be, the multiple measured (with
    its CI), how it was realised (noise sigma, ...) and the seeds' final accuracies (0-1)."""

    target: float
    multiple: float
    accuracies: tuple[float, ...]
    multiple_ci: tuple[float, float] | None = None
    setting: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LevelJudgement:
    target: float
    multiple: float
    multiple_ci: tuple[float, float] | None
    setting: dict
    accuracies: tuple[float, ...]
    accuracy_mean: float
    accuracy_sd: float
    drop_points: float
    drop_ci: tuple[float | None, float | None]
    judgement: Judgement

    @property
    def within(self) -> bool:
        return self.judgement == "within"


@dataclass(frozen=True)
class Budget:
    budget: float | None
    status: BudgetStatus
    bracket: tuple[float | None, float | None]
    baseline_mean: float
    baseline_sd: float
    tolerance_points: float
    confidence: float
    levels: tuple[LevelJudgement, ...]

    @property
    def deciding(self) -> LevelJudgement | None:
        """The lowest level that is not within: the one that ends the budget."""
        return next((j for j in self.levels if not j.within), None)


def find_budget(baseline: Sequence[float], levels: Sequence[Level], tolerance_points: float = 1.4,
                confidence: float = 0.95) -> Budget:
    """The budget of a calibration curve (the rule in the module docstring); accuracies are
    fractions, tolerance in points (1.4 = 1.4 percentage points)."""
    if tolerance_points < 0:
        raise ValueError(f"tolerance must be >= 0 points (got {tolerance_points})")
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1) (got {confidence})")
    if not baseline:
        raise ValueError("the baseline needs at least one seed's accuracy")
    if len(levels) < 2:
        raise ValueError(f"a ladder needs at least two levels (got {len(levels)})")
    if any(not lv.accuracies for lv in levels):
        raise ValueError("every level needs at least one seed's accuracy")
    ordered = sorted(levels, key=lambda lv: lv.multiple)
    judged = []
    for lv in ordered:
        drop, low, high = difference_interval(baseline, lv.accuracies, confidence)
        judged.append(LevelJudgement(lv.target, lv.multiple, lv.multiple_ci, dict(lv.setting), tuple(lv.accuracies),
                                     mean(lv.accuracies), sample_sd(lv.accuracies), drop, (low, high),
                                     judge_drop(low, high, tolerance_points)))
    value, status, bracket = budget_of_ladder([(j.multiple, j.within) for j in judged])
    return Budget(value, status, bracket, mean(baseline), sample_sd(baseline), tolerance_points, confidence,
                  tuple(judged))


def budget_of_ladder(passes: Sequence[tuple[float, bool]]) -> tuple[float | None, BudgetStatus,
                                                                       tuple[float | None, float | None]]:
    """The budget, its status and its bracket from ``(multiple, passes)`` per level, sorted by
    multiple: the highest level such that it and every level below it pass (the first level
    that does not pass ends it)."""
    first_out = next((i for i, (_, ok) in enumerate(passes) if not ok), None)
    if first_out is None:
        return passes[-1][0], "not_reached", (passes[-1][0], None)
    if first_out == 0:
        return None, "below_ladder", (None, passes[0][0])
    value = passes[first_out - 1][0]
    return value, "reached", (value, passes[first_out][0])


def seeds_to_decide(baseline_sd_points: float, level_sd_points: float, drop_points: float, tolerance_points: float,
                    confidence: float = 0.95, most: int = 64) -> int | None:
    """The seeds per side (the level and the baseline alike) at which a level whose seeds
    spread as measured would be shown within: the smallest n with drop + t(df) * sqrt((sa^2 +
    sb^2) / n) <= tolerance, on Welch's degrees of freedom; None when the mean drop is
    already at the tolerance (no number of seeds shows it within) or more than ``most`` would
    be needed."""
    if drop_points >= tolerance_points:
        return None
    va, vb = baseline_sd_points**2, level_sd_points**2
    for n in range(2, most + 1):
        if va + vb == 0.0:
            return n
        df = (va + vb) ** 2 / ((va**2 + vb**2) / (n - 1))
        if drop_points + two_sided(confidence, df) * math.sqrt((va + vb) / n) <= tolerance_points:
            return n
    return None


def bisect_target(bracket: tuple[float | None, float | None], resolution: float) -> float | None:
    """The next level between a reached budget's bracket ends, their geometric mean (3
    significant digits); None once the ends are within ``resolution`` (a factor) of each other."""
    low, high = bracket
    if low is None or high is None or low <= 0 or high / low <= resolution:
        return None
    return float(f"{math.sqrt(low * high):.3g}")


@dataclass(frozen=True)
class Learning:
    """What the BF16 baseline learned over the starting checkpoint (points, paired per seed)."""

    start_mean: float
    final_mean: float
    gain_points: float
    gain_low: float | None  # the lower end of the gain's interval (None: a single seed)
    required_points: float
    seeds: int

    @property
    def informative(self) -> bool:
        return self.gain_low is not None and self.gain_low > self.required_points


def learning(starts: Sequence[float], finals: Sequence[float], required_points: float,
             confidence: float = 0.95) -> Learning:
    """The baseline's gain from ``starts`` to ``finals`` (each seed's start and final held-out
    accuracy, fractions) with the lower end of its ``confidence`` interval."""
    if len(starts) != len(finals) or not finals:
        raise ValueError("learning needs each seed's start and final accuracy")
    gains = [100.0 * (f - s) for s, f in zip(starts, finals, strict=True)]
    gain = mean(gains)
    low = None
    if len(gains) >= 2:
        low = gain - two_sided(confidence, len(gains) - 1.0) * sample_sd(gains) / math.sqrt(len(gains))
    return Learning(mean(starts), mean(finals), gain, low, required_points, len(gains))


def extend_ladder(targets: Sequence[float], status: BudgetStatus, factor: float) -> list[float]:
    """One more rung where the ladder does not bracket: above the top when every level
    passed, below the bottom when the lowest did not; a rung below stays above 1 (1 is the
    BF16 unit itself): ``factor`` below the bottom, else halfway to 1 in log multiple, and
    none once the bottom is within 1% of 1."""
    top, bottom = max(targets), min(targets)
    if status == "not_reached":
        return [top * factor]
    if status == "below_ladder":
        lower = bottom / factor if bottom / factor > 1.0 else float(f"{math.sqrt(bottom):.3g}")
        return [lower] if lower > 1.01 and lower < bottom else []
    return []


Agreement = Literal["agrees", "differs", "inconclusive"]


def judge_agreement(low: float | None, high: float | None, tolerance_points: float) -> Agreement:
    """Whether two sources at a matched multiple train to the same accuracy, on the interval
    of their difference (points): ``agrees`` when it lies within [-tolerance, +tolerance],
    ``differs`` when it lies wholly outside, ``inconclusive`` otherwise (an unbounded interval
    included).  The strict rule's mirror: noise can only make agreement inconclusive."""
    if low is not None and high is not None and -tolerance_points <= low and high <= tolerance_points:
        return "agrees"
    if (low is not None and low > tolerance_points) or (high is not None and high < -tolerance_points):
        return "differs"
    return "inconclusive"


