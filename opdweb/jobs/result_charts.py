"""What the job page draws from a finished job's result (not its traces): a sensitivity
scan's ranking and layer × module heatmap, a drift job's first-divergence histogram and
identical-prefix curve.  Plain lists, handed to the page as JSON."""
from __future__ import annotations

import re

# "model.layers.3.self_attn.q_proj" -> layer 3, module "self_attn.q_proj"
_MODULE_LABEL = re.compile(r"(?:^|\.)layers\.(\d+)\.(.+)$")


def result_charts(job) -> dict | None:
    """The figures for ``job``'s result, or None when its kind draws none."""
    result = job.result
    if not isinstance(result, dict):
        return None
    if job.kind == "sensitivity" and isinstance(result.get("ranking"), list):
        return sensitivity_charts(result["ranking"], by_module=(job.config or {}).get("unit") == "module")
    if job.kind == "drift" and isinstance(result.get("first_divergence"), dict):
        return drift_charts(result)
    return None


def sensitivity_charts(ranking: list[dict], by_module: bool) -> dict:
    """Units ranked by their multiple (largest first, as the scan ranks them), with the CI
    as error bars; with ``by_module``, the same multiples on a layer × module grid."""
    ci = [row.get("multiple_ci") or [None, None] for row in ranking]
    charts = {"kind": "sensitivity", "ranking": {
        "units": [row["unit"] for row in ranking],
        "multiples": [row.get("multiple") for row in ranking],
        "ci_low": [c[0] for c in ci],
        "ci_high": [c[1] for c in ci],
    }}
    if by_module:
        charts["heatmap"] = module_heatmap(ranking)
    return charts


def module_heatmap(ranking: list[dict]) -> dict:
    """``z[module][layer]``: the multiple of each module kept alone in FP8 (None where the
    scan has no such unit)."""
    cells = {}
    for row in ranking:
        match = _MODULE_LABEL.search(row["unit"])
        if match:
            cells[(int(match.group(1)), match.group(2))] = row.get("multiple")
    layers = sorted({layer for layer, _ in cells})
    modules = sorted({module for _, module in cells})
    return {"layers": layers, "modules": modules,
            "z": [[cells.get((layer, module)) for layer in layers] for module in modules]}


def drift_charts(result: dict) -> dict:
    """How many decodes first diverge at each token position, and the fraction of decodes
    still identical after L tokens, for L = 1, 2, ..."""
    histogram = result["first_divergence"].get("histogram") or {}
    positions = sorted(int(p) for p in histogram)
    curve = result.get("identical_prefix_curve") or []
    return {"kind": "drift",
            "histogram": {"positions": positions, "counts": [histogram[str(p)] for p in positions]},
            "prefix": {"lengths": list(range(1, len(curve) + 1)), "fractions": curve}}
