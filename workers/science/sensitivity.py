"""Per-layer sensitivity, recipe search, and KV-cache capacity.

Sensitivity applies the config to one unit at a time (a decoder layer, or one linear
module / one layer's KV cache) and keeps everything else in BF16; the unit's multiple says
how much of the mismatch it causes.  The recipe search keeps the most sensitive units in
BF16, in ranking order, and finds the shortest such prefix whose multiple is under the
target (binary search: the multiple falls as more units are kept).  Staleness is a
whole-model property and is not localised.
"""
from __future__ import annotations

import time

from .config import RolloutConfig, SensitivityJobConfig
from .reporting import NullReporter, Reporter


def _units(session, unit: str) -> list[tuple[str, list]]:
    """(label, keep_bf16 entries that leave only this unit perturbed)."""
    from .engines.hf import decoder_layer_count, decoder_linears, kv_pseudo_name

    n = decoder_layer_count(session.trainer.model)
    if unit == "layer":
        return [(f"layer {i}", [j for j in range(n) if j != i]) for i in range(n)]
    names = list(decoder_linears(session.trainer.model))
    if session.rollout.kv_cache != "none":
        names += [kv_pseudo_name(i) for i in range(n)]
    return [(name, [other for other in names if other != name]) for name in names]


def _with_keep(cfg: RolloutConfig, extra: list) -> RolloutConfig:
    return cfg.model_copy(update={"keep_bf16": list(cfg.keep_bf16) + list(extra)})


def run_sensitivity(cfg: SensitivityJobConfig, reporter: Reporter | None = None) -> dict:
    """Rank units by their multiple; with ``target``, the smallest BF16 set (in ranking order)
    that brings the config under it, and the KV capacity that recipe keeps."""
    from .capacity import kv_capacity
    from .mismatch import MeasurementSession, compare
    from .metrics import finite_or_none, json_safe, multiple_with_ci

    reporter = reporter or NullReporter()
    t0 = time.perf_counter()
    session = MeasurementSession(cfg, reporter)
    rollout = session.rollout
    session.check_rollout(rollout)
    units = _units(session, cfg.unit)
    n_prompts = len(session.prompt_ids)
    search_budget = max(1, len(units)).bit_length() + 1 if cfg.target is not None else 0
    total = 2 + len(units) + search_budget
    step = [0]

    def measure(c: RolloutConfig, label: str):
        k = step[0]
        step[0] += 1
        return session.measure(c, label, (k / total, min(1.0, (k + 1) / total)))

    def multiple(m, ref):
        value, ci = multiple_with_ci(m.records, ref.records, cfg.metric, n_prompts, cfg.bootstrap, seed=cfg.seed)
        return finite_or_none(value), ci

    step[0] += 1
    ref = session.reference(session.reference_config(cfg.reference_engine), (0.0, 1 / total))
    full = measure(rollout, "full config")
    full_report = compare(session, full, ref, cfg.metric, cfg.bootstrap)

    ranking = []
    for i, (label, keep) in enumerate(units):
        m = measure(_with_keep(rollout, keep), label)
        value, ci = multiple(m, ref)
        ranking.append({"unit": label, "multiple": value, "multiple_ci": ci, "value": _metric_mean(m, cfg.metric)})
        if value is not None:
            reporter.log(i, {"sensitivity/multiple": value})
    order = sorted(range(len(units)), key=lambda i: -(ranking[i]["multiple"] or 0.0))
    ranked = [dict(ranking[i], rank=r + 1) for r, i in enumerate(order)]

    def keep_entries(k: int) -> list:
        out: list = []
        for i in order[:k]:
            label = units[i][0]
            out.append(int(label.split()[1]) if cfg.unit == "layer" else label)
        return out

    recipe = None
    if cfg.target is not None:
        trials: dict[int, dict] = {len(units): None}  # type: ignore[dict-item]
        full_mult = full_report["multiple"]
        if full_mult is not None and full_mult <= cfg.target:
            recipe = {"keep_bf16": [], "multiple": full_mult, "multiple_ci": full_report["multiple_ci"], "reached": True}
        else:
            lo, hi = 1, len(units)  # smallest k in [lo, hi] with multiple(k) <= target
            best = None
            trials = {}
            while lo <= hi:
                mid = (lo + hi) // 2
                c = _with_keep(rollout, keep_entries(mid))
                m = measure(c, f"recipe: keep {mid} in BF16")
                value, ci = multiple(m, ref)
                trials[mid] = {"kept": mid, "multiple": value, "multiple_ci": ci}
                if value is not None:
                    reporter.log(mid, {"sensitivity/recipe_multiple": value})
                if value is not None and value <= cfg.target:
                    best = mid
                    hi = mid - 1
                else:
                    lo = mid + 1
            if best is None:
                recipe = {"keep_bf16": keep_entries(len(units)), "multiple": trials.get(len(units), {}).get("multiple"),
                          "reached": False,
                          "note": "keeping every unit in BF16 does not reach the target (staleness is not localised)"}
            else:
                recipe = {"keep_bf16": keep_entries(best), "multiple": trials[best]["multiple"],
                          "multiple_ci": trials[best]["multiple_ci"], "reached": True}
            recipe["trials"] = [trials[k] for k in sorted(trials)]
        recipe["target"] = cfg.target
        recipe_cfg = _with_keep(rollout, recipe["keep_bf16"])
        recipe["kv_cache"] = kv_capacity(session.model_config, session.kv_layer_formats(recipe_cfg))
        recipe["rollout"] = recipe_cfg.model_dump(mode="json")

    reporter.progress(1.0, "done")
    return json_safe({
        "metric": cfg.metric,
        "model": cfg.model,
        "task": session.task,
        "prompts": n_prompts,
        "unit": cfg.unit,
        "rollout": rollout.model_dump(mode="json"),
        "value": full_report["value"],
        "reference_value": full_report["reference_value"],
        "multiple": full_report["multiple"],
        "multiple_ci": full_report["multiple_ci"],
        "tokens": full_report["tokens"],
        "metrics": full_report["metrics"],
        "ranking": ranked,
        "recipe": recipe,
        "kv_cache": kv_capacity(session.model_config, session.kv_layer_formats(rollout)),
        "timing": {"total_s": time.perf_counter() - t0, "measurements": step[0]},
    })


def _metric_mean(m, metric: str):
    from .metrics import metric_values, summarize

    return metric_values(summarize(m.records)).get(metric)
