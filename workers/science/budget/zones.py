"""What a calibrated ladder shows about a multiple: three zones, two criteria, and what would
decide the middle zone.  Pure Python: the web process draws and explains them.

**Three zones.**  A ladder's levels are judged on their drop's interval
(:func:`~.arithmetic.judge_drop`).  Along the multiple they split it into

- *shown safe*: at most the budget (the highest level such that it and every level below it
  pass the criterion);
- *shown harmful*: at or above the first level judged ``beyond`` (its whole drop interval
  lies above the tolerance); none when no level was;
- *not shown safe* between them: the first level that did not pass ended the budget, but
  nothing there was shown to hurt (it was ``inconclusive``: its interval straddles the
  tolerance).  More seeds at those levels, or a level between the budget and the next one,
  would decide it (:func:`to_decide`).

**Two criteria** for "a level passes", on the same stored curve:

- ``strict`` (the product's default): the *upper end* of the drop's two-sided 95 % Welch
  interval is at most the tolerance (a one-sided 97.5 % non-inferiority test).  A defensible
  lower bound; with few seeds it is set by the seeds' spread rather than by any drop.
- ``mean`` (the paper's wording): the *mean* drop is at most the tolerance.  Never below the
  strict budget on the same curve, and not a guarantee: half of a level's noise lies above
  its mean.

The harmful zone is the same under both: it is what the evidence shows, not a criterion.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

from ..verdicts import BudgetStatus
from .arithmetic import Judgement, budget_of_ladder

#: Which criterion a level's drop must meet for the budget to reach it.
Criterion = Literal["strict", "mean"]
CRITERIA: dict[str, str] = {
    "strict": "the upper end of the drop's 95 % interval is at most the tolerance",
    "mean": "the mean drop is at most the tolerance (the paper's criterion)",
}
#: The most seeds a calibration may give a level (``CalibrationJobConfig.max_seeds``).
MAX_SEEDS = 32


class Rung(Protocol):
    """One judged level of a ladder as a stored budget keeps it."""

    @property
    def target(self) -> float: ...
    @property
    def multiple(self) -> float: ...
    @property
    def seeds(self) -> int: ...
    @property
    def drop_points(self) -> float: ...
    @property
    def within(self) -> bool: ...
    @property
    def judgement(self) -> Judgement | None: ...


def passes(rung: Rung, criterion: Criterion, tolerance: float) -> bool:
    """Whether ``rung`` passes ``criterion`` (a curve stored before judgements had only
    ``within``, which is its strict verdict)."""
    return rung.within if criterion == "strict" else rung.drop_points <= tolerance


def budget_under(rungs: Sequence[Rung], criterion: Criterion,
                 tolerance: float) -> tuple[float | None, BudgetStatus, tuple[float | None, float | None]]:
    """The budget, its status and its bracket of a judged ladder under ``criterion``."""
    ordered = sorted(rungs, key=lambda r: r.multiple)
    if not ordered:
        return None, "below_ladder", (None, None)
    return budget_of_ladder([(r.multiple, passes(r, criterion, tolerance)) for r in ordered])


def first_harmful(rungs: Sequence[Rung]) -> float | None:
    """The multiple of the lowest level judged ``beyond`` (its whole drop interval above the
    tolerance), where the shown-harmful zone starts; None when no level was (or the curve
    predates judgements)."""
    return min((r.multiple for r in rungs if r.judgement == "beyond"), default=None)


Zone = Literal["shown_safe", "not_shown_safe", "shown_harmful"]


def zone_of(multiple: float, budget: float | None, harmful: float | None) -> Zone:
    """The zone a (point) multiple lies in."""
    if budget is not None and multiple <= budget:
        return "shown_safe"
    if harmful is not None and multiple >= harmful:
        return "shown_harmful"
    return "not_shown_safe"


@dataclass(frozen=True)
class ToDecide:
    """What would decide a multiple in the not-shown-safe zone: more seeds at the levels that
    ended the budget below it, or a new level between two multiples (``between``; its upper
    end None: above the ladder's top), calibrated again with these ``levels`` (targets) and
    ``max_seeds``."""

    seeds_at: tuple[float, ...]
    seeds_now: tuple[int, ...]
    between: tuple[float, float | None]
    new_level: float
    levels: tuple[float, ...]
    max_seeds: int

    def words(self) -> str:
        more = ", ".join(f"{m:.3g}x ({n} seeds now)" for m, n in zip(self.seeds_at, self.seeds_now, strict=True))
        low, high = self.between
        level = (f"a level at about {self.new_level:.3g}x, between {low:.3g}x and {high:.3g}x" if high is not None
                 else f"a level at about {self.new_level:.3g}x, above the ladder's top {low:.3g}x")
        return f"more seeds (up to {self.max_seeds}) at {more}, or {level}" if more else level

    def command(self) -> str:
        """The calibration again with these levels and seeds (the other options as before)."""
        return (f"python -m workers calibrate <the calibration's options> --levels "
                f"{','.join(f'{t:.4g}' for t in self.levels)} --max-seeds {self.max_seeds}")


def to_decide(rungs: Sequence[Rung], budget: float | None, harmful: float | None,
              up_to: float | None = None) -> ToDecide | None:
    """What would show the multiples up to ``up_to`` safe (default: the next level above the
    budget); None when nothing is undecided there (``up_to`` is shown safe or shown harmful).

    The budget reaches ``up_to`` once every level up to the first at or above it passes: the
    levels there that are not within need more seeds (an inconclusive interval narrows as
    1/sqrt(seeds)).  A new level between the budget and the next level, or around ``up_to``,
    tests the gap directly."""
    ordered = sorted(rungs, key=lambda r: r.multiple)
    floor = budget if budget is not None else 1.0  # below the ladder: nothing above BF16 is shown safe
    above = [r for r in ordered if r.multiple > floor]
    if not above and up_to is None:
        return None
    point = up_to if up_to is not None else above[0].multiple
    if point <= floor or (harmful is not None and point >= harmful):
        return None
    reach = next((r.multiple for r in above if r.multiple >= point), math.inf)
    undecided = [r for r in above if r.multiple <= reach and not r.within and r.judgement != "beyond"]
    low = max([floor] + [r.multiple for r in above if r.multiple < point])
    high = reach if reach != math.inf else None
    new_level = point if up_to is not None and point > low else math.sqrt(low * high) if high else low * 10
    new_level = float(f"{new_level:.3g}")
    kept = sorted({r.target for r in ordered if r.multiple <= reach} | {new_level})
    max_seeds = min(MAX_SEEDS, 2 * max([r.seeds for r in undecided] + [3]))
    return ToDecide(tuple(r.multiple for r in undecided), tuple(r.seeds for r in undecided), (low, high), new_level,
                    tuple(kept), max_seeds)


@dataclass(frozen=True)
class CurveReading:
    """What one judged ladder shows, read once for every page and table: the budget under
    each criterion, where the shown-harmful zone starts, and what would decide the zone above
    the strict budget."""

    strict: float | None
    strict_status: BudgetStatus
    mean: float | None
    mean_status: BudgetStatus
    harmful: float | None
    undecided: ToDecide | None


def read_curve(rungs: Sequence[Rung], tolerance: float) -> CurveReading:
    """The :class:`CurveReading` of a judged ladder."""
    strict, strict_status, _ = budget_under(rungs, "strict", tolerance)
    mean, mean_status, _ = budget_under(rungs, "mean", tolerance)
    harmful = first_harmful(rungs)
    return CurveReading(strict, strict_status, mean, mean_status, harmful, to_decide(rungs, strict, harmful))


__all__ = ["CRITERIA", "Criterion", "CurveReading", "Rung", "ToDecide", "Zone", "budget_under", "first_harmful",
           "passes", "read_curve", "to_decide", "zone_of"]
