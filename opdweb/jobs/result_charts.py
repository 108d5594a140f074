"""How a finished job's page shows its result, per kind: a presenter names the partial
template that shows the kind's result (a sensitivity scan's recipe, a drift job's
divergence, an admission verdict) and the figures drawn from it, so the page includes what
the kind's presenter says and never tests a kind's name.

Presenters read the typed result (the kind's result model, :func:`~opdweb.jobs.results.typed_result`); a stored
result that does not validate as its kind's is shown only as raw JSON."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from pydantic import BaseModel

from opdweb.jobs.results import typed_result
from workers.science.kinds import Kind
from workers.science.results import DriftReport, SensitivityReport, SensitivityRow

# "model.layers.3.self_attn.q_proj" -> layer 3, module "self_attn.q_proj"
_MODULE_LABEL = re.compile(r"(?:^|\.)layers\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class ResultPresenter:
    """What a kind's page shows of its result: ``headline`` (a partial shown under the job's
    state), ``details`` (a partial shown after the measurement's summary) and ``charts``
    (the figures' data, handed to the page as JSON)."""

    headline: str | None = None
    details: str | None = None
    charts: Callable[[BaseModel, dict], dict | None] | None = None  # (result, the job's config)


def sensitivity_charts(result: BaseModel, config: dict) -> dict | None:
    """Parts ranked by their multiple (largest first, as the scan ranks them), with the CI
    as error bars; at the module granularity, the same multiples on a layer × module grid
    (a report stored before it recorded its granularity: the config's, once spelled ``unit``)."""
    assert isinstance(result, SensitivityReport)
    granularity = result.granularity or config.get("granularity") or config.get("unit")
    ci = [row.multiple_ci or [None, None] for row in result.ranking]
    charts: dict = {"kind": Kind.SENSITIVITY.value, "ranking": {
        "units": [row.unit for row in result.ranking],
        "multiples": [row.multiple for row in result.ranking],
        "ci_low": [c[0] for c in ci],
        "ci_high": [c[1] for c in ci],
    }}
    if granularity == "module":
        charts["heatmap"] = module_heatmap(result.ranking)
    return charts


def module_heatmap(ranking: list[SensitivityRow]) -> dict:
    """``z[module][layer]``: the multiple of each module kept alone in FP8 (None where the
    scan has no such part)."""
    cells = {}
    for row in ranking:
        match = _MODULE_LABEL.search(row.unit)
        if match:
            cells[(int(match.group(1)), match.group(2))] = row.multiple
    layers = sorted({layer for layer, _ in cells})
    modules = sorted({module for _, module in cells})
    return {"layers": layers, "modules": modules,
            "z": [[cells.get((layer, module)) for layer in layers] for module in modules]}


def drift_charts(result: BaseModel, config: dict) -> dict | None:
    """How many decodes first diverge at each token position, and the fraction of decodes
    still identical after L tokens, for L = 1, 2, ..."""
    assert isinstance(result, DriftReport)
    histogram = result.first_divergence.get("histogram") or {}
    positions = sorted(int(p) for p in histogram)
    curve = result.identical_prefix_curve
    return {"kind": Kind.DRIFT.value,
            "histogram": {"positions": positions, "counts": [histogram[str(p)] for p in positions]},
            "prefix": {"lengths": list(range(1, len(curve) + 1)), "fractions": curve}}


PRESENTERS: dict[str, ResultPresenter] = {
    Kind.ADMISSION: ResultPresenter(headline="jobs/results/admission.html"),
    Kind.CALIBRATION: ResultPresenter(headline="jobs/results/calibration.html"),
    Kind.SENSITIVITY: ResultPresenter(details="jobs/results/sensitivity.html", charts=sensitivity_charts),
    Kind.DRIFT: ResultPresenter(details="jobs/results/drift.html", charts=drift_charts),
}


def presented(job) -> dict:
    """The page context of ``job``'s result: ``result`` (typed, or None), its kind's
    ``presenter`` (None when the kind has none or the result is not typed) and
    ``result_charts``."""
    result = typed_result(job)
    presenter = PRESENTERS.get(job.kind) if result is not None else None
    charts = None
    if presenter is not None and presenter.charts is not None:
        charts = presenter.charts(result, job.config if isinstance(job.config, dict) else {})
    return {"result": result, "presenter": presenter, "result_charts": charts}


def result_charts(job) -> dict | None:
    """The figures for ``job``'s result, or None when its kind draws none."""
    return presented(job)["result_charts"]
