"""A measurement's multiple of the BF16 unit, and how far it can be trusted.

The **multiple** is the primary metric (default k3) of the rollout config over the unit's
(a named BF16 engine measured the same way on the same prompts and seeds), with a paired
bootstrap CI over prompts.  With it:

* the **floor**: the unit against itself under a second seed; a multiple whose CI reaches
  below the floor cannot be told apart from BF16;
* **sample size by precision**: the stop rule of the measuring rounds (the CI's half-width
  within a target fraction of the multiple, or the token budget spent);
* the share of the metric carried by the top 1% of tokens (heavy tails make wide CIs).
"""
from __future__ import annotations

import math
from typing import Sequence

from .measurement import Measurement, MeasurementSession
from .results import Comparison, unit_vanishes


def compare(session: MeasurementSession, m: Measurement, ref: Measurement, metric: str, n_boot: int,
            buckets: list[int] | None = None) -> Comparison:
    """The report body shared by every job: value, reference value, multiple and its CI."""
    from .metrics import (
        finite_or_none,
        json_safe,
        mean_with_ci,
        metric_values,
        multiple_with_ci,
        position_buckets,
        summarize,
    )

    summary, ref_summary = summarize(m.records), summarize(ref.records)
    values, ref_values = metric_values(summary), metric_values(ref_summary)
    n = max(m.records.n_sequences, ref.records.n_sequences)
    seed = session.job.seed_effective
    multiple, ci = multiple_with_ci(m.records, ref.records, metric, n, n_boot, seed=seed)
    ref_ci = mean_with_ci(ref.records, metric, n, n_boot, seed=seed)
    if unit_vanishes(ref_values.get(metric), ref_ci):  # undefined, not a huge number: the value and its CI stand
        multiple, ci = None, None
    out = {
        "metric": metric,
        "value": values.get(metric),
        "value_ci": mean_with_ci(m.records, metric, n, n_boot, seed=seed),
        "reference_value": ref_values.get(metric),
        "reference_value_ci": ref_ci,
        "multiple": finite_or_none(multiple),
        "multiple_ci": ci,
        "tokens": m.records.tokens,
        "reference_tokens": ref.records.tokens,
        "metrics": values,
        "reference_metrics": ref_values,
        "summary": summary,
        "reference_summary": ref_summary,
        "accuracy": m.accuracy,
        "reference_accuracy": ref.accuracy,
    }
    if buckets is not None:
        out["buckets"] = position_buckets(m.records, buckets)
    return Comparison.model_validate(json_safe(out))


def relative_half_width(multiple: float | None, ci: Sequence[float | None] | None) -> float | None:
    """The CI's half-width as a fraction of the multiple (None when either is missing)."""
    if multiple is None or ci is None or not multiple > 0:
        return None
    lo, hi = ci
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return (hi - lo) / 2.0 / multiple


def precision(multiple: float | None, multiple_ci, value: float | None, value_ci,
              vanished: bool) -> tuple[float | None, str]:
    """The CI's relative half-width that the stop rule reads, and of what: the multiple's, or,
    where the unit vanishes and no multiple is defined, the absolute value's (the one the
    admission then decides on), so that sampling stops once that is precise enough instead
    of running to the token budget."""
    if vanished:
        return relative_half_width(value, value_ci), "absolute"
    return relative_half_width(multiple, multiple_ci), "multiple"


def stop_reason(rel_half_width: float | None, target: float, tokens: int, max_tokens: int,
                prompts: int, max_prompts: int) -> str | None:
    """Why sampling rounds stop now, or None to sample another round: the CI reached the
    target half-width (``precision``), the token budget is spent, or no prompts are left.
    A target of 0 means one round."""
    if target <= 0:
        return "one round (target_ci 0)"
    if rel_half_width is not None and rel_half_width <= target:
        return "precision"
    if tokens >= max_tokens:
        return "token budget"
    if prompts >= max_prompts:
        return "prompts exhausted"
    return None


def next_round_size(prompts: int, rel_half_width: float | None, target: float, first: int) -> int:
    """Prompts to add: the CI narrows as 1/sqrt(n), so about n((w/target)^2 - 1), at least
    the first round's size and at most three times what was measured."""
    if rel_half_width is None or target <= 0:
        return max(first, prompts)
    need = prompts * ((rel_half_width / target) ** 2 - 1.0)
    return int(min(max(need * 1.1, first), 3 * prompts))


def floor_from(a, b, metric: str, n: int, n_boot: int, seed: int) -> dict:
    """The unit's own spread: the multiple of the unit under a second seed (``b``) over the
    unit (``a``), and the floor: the 95th percentile of max(R, 1/R) over paired bootstrap
    resamples.  A multiple at or below the floor cannot be told apart from BF16."""
    import numpy as np

    from .metrics import finite_or_none, multiple_with_ci, per_sequence_sums

    value, ci = multiple_with_ci(b.records, a.records, metric, n, n_boot, seed=seed)
    s1, c1 = per_sequence_sums(b.records, metric, n)
    s0, c0 = per_sequence_sums(a.records, metric, n)
    floor = None
    if value is not None and value > 0 and n >= 2 and n_boot > 0:
        rng = np.random.default_rng(seed + 7)
        idx = rng.integers(0, n, size=(min(n_boot, max(1, 2_000_000 // n)), n))
        with np.errstate(divide="ignore", invalid="ignore"):
            r = (s1[idx].sum(1) / np.maximum(c1[idx].sum(1), 1)) / (s0[idx].sum(1) / np.maximum(c0[idx].sum(1), 1))
        r = r[np.isfinite(r) & (r > 0)]
        if r.size:
            floor = float(np.percentile(np.maximum(r, 1.0 / r), 95))
    elif value is not None and value > 0:
        floor = max(value, 1.0 / value)
    return {"value": finite_or_none(floor), "seed_multiple": finite_or_none(value), "seed_multiple_ci": ci,
            "seeds": [a.cfg.seed, b.cfg.seed]}


def top_share(records, metric: str, fraction: float = 0.01) -> float | None:
    """Share of the summed per-token metric carried by the top ``fraction`` of tokens."""
    import numpy as np

    from .metrics import token_terms

    v = token_terms(records).get(metric)
    if v is None or v.size == 0:
        return None
    v = np.abs(v)
    total = float(v.sum())
    if total <= 0:
        return None
    k = max(1, int(math.ceil(fraction * v.size)))
    return float(np.sort(v)[-k:].sum() / total)


def unit_block(session: MeasurementSession, name: str, ref: Measurement, floor: dict, m: Measurement, metric: str,
               n: int, n_boot: int, known: tuple | None = None) -> dict:
    """The multiple of ``m`` against one unit, with that unit's floor (``known``: the
    (reference value, multiple, CI) already computed for it)."""
    from .fingerprint import library_versions
    from .metrics import finite_or_none, metric_values, multiple_with_ci, summarize

    if known is None:
        value, ci = multiple_with_ci(m.records, ref.records, metric, n, n_boot, seed=session.job.seed_effective)
        known = (metric_values(summarize(ref.records)).get(metric), finite_or_none(value), ci)
    return {"engine": name, "dtype": "bf16", "versions": library_versions(name), "reference_value": known[0],
            "reference_tokens": ref.records.tokens, "multiple": known[1], "multiple_ci": known[2], "floor": floor}
