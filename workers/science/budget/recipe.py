"""The cheapest rollout recipe within a budget.

Candidates span the rollout-config space the engines run: FP8 weights at each scale
granularity, with and without FP8 KV cache, and the most aggressive of them with BF16
exceptions: the set the sensitivity scan's target search chooses, and the top one and two
parts its ranking names.  Each is measured (same prompts,
seed and unit as the admission check; the BF16 reference comes from the cache) and placed
by (KV capacity, multiple).  The Pareto front keeps the candidates no other beats on both;
the recipe is the one with the largest KV capacity whose CI upper end, times the margin,
stays under the budget (ties: the lower multiple).
"""
from __future__ import annotations

from typing import Sequence

from ..config import ConfigError, MismatchJobConfig, RolloutConfig, SensitivityJobConfig
from ..reporting import Reporter
from ..sensitivity import keep_entry, run_sensitivity

WEIGHT_SCALES = ("tensor", "channel", "block")
#: BF16-exception candidates: the top 1 .. this many ranked parts kept in BF16 (never all of them).
EXCEPTIONS_TRIED = 2


def candidate_rollouts(base: RolloutConfig) -> list[tuple[str, RolloutConfig]]:
    """FP8 E4M3 weights per tensor / channel / block, each without and with FP8 KV."""
    out = []
    for scale in WEIGHT_SCALES:
        for kv in ("none", "fp8_e4m3"):
            cfg = base.model_copy(update={"weights": "fp8_e4m3", "weight_scale": scale, "kv_cache": kv,
                                          "keep_bf16": [], "noise_sigma": 0.0, "staleness": 0})
            out.append((f"FP8 W ({scale})" + (" + FP8 KV" if kv != "none" else ""), cfg))
    return out


def pareto_front(points: Sequence[dict]) -> list[dict]:
    """The points no other point beats on both capacity (higher) and multiple (lower)."""
    front = []
    for p in points:
        if p["multiple"] is None:
            continue
        dominated = any(
            q is not p and q["multiple"] is not None
            and q["capacity"] >= p["capacity"] and q["multiple"] <= p["multiple"]
            and (q["capacity"] > p["capacity"] or q["multiple"] < p["multiple"])
            for q in points)
        if not dominated:
            front.append(p)
    return sorted(front, key=lambda p: (p["capacity"], -p["multiple"]))


def cheapest_within(points: Sequence[dict], budget: float, margin: float) -> dict | None:
    """The largest-capacity point whose CI upper end times ``margin`` is under ``budget``."""
    ok = [p for p in points if p["multiple"] is not None and p["ci"] and p["ci"][1] * margin < budget]
    return max(ok, key=lambda p: (p["capacity"], -p["multiple"])) if ok else None


def recipe_within_budget(measurement: MismatchJobConfig, budget: float, margin: float, reporter: Reporter) -> dict:
    """The candidates measured, their Pareto front and the cheapest within ``budget`` (the
    admission result's recipe keys)."""
    from ..mismatch import run_mismatch

    points: list[dict] = []
    skipped: list[dict] = []
    for label, rollout in candidate_rollouts(measurement.rollout):
        if reporter.should_stop():
            break
        try:
            r = run_mismatch(measurement.model_copy(update={"rollout": rollout, "target_ci": 0.0}), reporter)
        except ConfigError as exc:  # e.g. a block size that does not divide this model's layers
            skipped.append({"label": label, "why": str(exc)})
            continue
        points.append({"label": label, "rollout": r.rollout, "multiple": r.multiple, "ci": r.multiple_ci,
                       "capacity": r.kv_cache.capacity_ratio})
    most = max(points, key=lambda p: (p["capacity"], p["multiple"] or 0.0)) if points else None
    layers = None
    if most is not None:
        scan = run_sensitivity(SensitivityJobConfig.model_validate({
            **measurement.model_dump(include=set(SensitivityJobConfig.model_fields) - {"target_ci"}),
            "rollout": most["rollout"], "target": budget / margin, "prompts": min(measurement.prompts, 128)}), reporter)
        layers = [row.model_dump(mode="json") for row in scan.ranking[:5]]
        recipe = scan.recipe or {}
        tried: list[list] = []
        if recipe.get("reached") and recipe.get("keep_bf16"):
            tried.append(list(recipe["keep_bf16"]))
            points.append({"label": f"{most['label']} with {len(recipe['keep_bf16'])} unit(s) in BF16",
                           "rollout": recipe["rollout"], "multiple": recipe["multiple"], "ci": recipe["multiple_ci"],
                           "capacity": recipe["kv_cache"]["capacity_ratio"]})
        # The parts the ranking names, kept in BF16 one and two at a time, measured whatever the scan's target
        # search found: a ranking that names the sensitive layer always yields a candidate that spares it.
        ranked = [row.unit for row in scan.ranking if row.multiple is not None]
        for count in range(1, min(EXCEPTIONS_TRIED, len(ranked) - 1) + 1):
            keep = [keep_entry(unit) for unit in ranked[:count]]
            if keep in tried or reporter.should_stop():
                continue
            tried.append(keep)
            rollout = RolloutConfig.model_validate({**most["rollout"], "keep_bf16": keep})
            r = run_mismatch(measurement.model_copy(update={"rollout": rollout, "target_ci": 0.0}), reporter)
            points.append({"label": f"{most['label']} with {', '.join(ranked[:count])} in BF16", "rollout": r.rollout,
                           "multiple": r.multiple, "ci": r.multiple_ci, "capacity": r.kv_cache.capacity_ratio})
    front = pareto_front(points)
    return {"recipe": cheapest_within(points, budget, margin), "recipe_candidates": points, "pareto_front": front,
            "recipe_margin": margin, "layers": layers, "recipe_skipped": skipped}
