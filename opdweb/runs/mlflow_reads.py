"""What MLflow's reading endpoints answer, inside the token's team only: runs found by a
search (:mod:`.mlflow_search`), a metric's history, the team's experiments.  Another
team's runs and experiments are never found, whatever ids a request names."""
from __future__ import annotations

from collections import defaultdict

from django.db.models import F

from opdweb.runs import mlflow_search as search
from opdweb.runs import mlflow_shapes as shapes
from opdweb.runs.actions import DEFAULT_EXPERIMENT_ID, DEFAULT_EXPERIMENT_NAME, run_for
from opdweb.runs.models import MlflowExperiment, MlflowRun
from opdweb.tokens.models import ApiToken
from opdweb.traces.models import TracePoint, TraceSeries


def team_experiments(token: ApiToken, experiment_ids: list[str]) -> list[MlflowExperiment]:
    """The team's experiments among ``experiment_ids`` (``"0"`` is its "Default"); an id
    the team has not is no experiment, as MLflow's store finds no runs in it."""
    pks = [int(e) for e in experiment_ids if e.isascii() and e.isdigit() and e != DEFAULT_EXPERIMENT_ID
           and len(e) < 19]
    found = MlflowExperiment.objects.filter(team=token.team_id, pk__in=pks)
    if DEFAULT_EXPERIMENT_ID in experiment_ids:
        found = found | MlflowExperiment.objects.filter(team=token.team_id, name=DEFAULT_EXPERIMENT_NAME)
    return list(found)


def latest_metrics_of(job_ids: list[int]) -> dict[int, list[dict]]:
    """Each job's metrics at their last step, in one query (``runs/get`` reads one job's)."""
    points = (TracePoint.objects.filter(series__job_id__in=job_ids, step=F("series__last_step"))
              .values_list("series__job_id", "series__key", "value", "wall_time", "step")
              .order_by("series__job_id", "series__key"))
    metrics: dict[int, list[dict]] = defaultdict(list)
    for job_id, key, value, wall, step in points:
        metrics[job_id].append(shapes.metric(key, value, wall, step))
    return metrics


def search_runs(token: ApiToken, experiment_ids: list[str], filter_string: str, order_by: list[str],
                max_results: int, page_token: str) -> tuple[list[dict], str | None]:
    """The page of runs in the team's ``experiment_ids`` that match ``filter_string``, in
    MLflow's order, as ``runs/search`` answers them; and the next page's token."""
    comparisons = search.parse_filter(filter_string)
    orders = search.parse_order_by(order_by)
    search.offset_of(page_token)  # a bad token is refused before anything is read
    runs = list(MlflowRun.objects.filter(experiment__in=team_experiments(token, experiment_ids),
                                         job__team=token.team_id).select_related("job"))
    metrics = latest_metrics_of([r.job_id for r in runs])
    found = []
    for run in runs:
        shaped = shapes.run(run, metrics.get(run.job_id, []))
        info, data = shaped["info"], shaped["data"]
        found.append(search.Searched(
            info={**info, "end_time": info.get("end_time")},
            metrics={m["key"]: _number(m["value"]) for m in data["metrics"]},
            params={p["key"]: p["value"] for p in data["params"]},
            tags={t["key"]: t["value"] for t in data["tags"]}, payload=shaped))
    matching = [r for r in found if search.matches(r, comparisons)]
    page, next_token = search.page(search.sort_runs(matching, orders), page_token, max_results)
    return [r.payload for r in page], next_token


def _number(value: float | str) -> float:
    return float(value) if isinstance(value, str) else value  # "NaN", "Infinity" as MLflow sends them


def metric_history(token: ApiToken, run_id: str, key: str, max_results: int | None,
                   page_token: str) -> tuple[list[dict], str | None]:
    """The points of ``key`` in the run, step by step (the trace store holds one value per
    step), a page of ``max_results`` at a time when asked for pages, all of them otherwise."""
    run = run_for(token, run_id)
    start = search.offset_of(page_token)
    series = TraceSeries.objects.filter(job_id=run.job_id, key=key).first()
    if series is None:
        return [], None
    points = TracePoint.objects.filter(series=series).order_by("step").values_list("value", "wall_time", "step")
    if max_results is None:
        return [shapes.metric(key, v, w, s) for v, w, s in points[start:]], None
    rows = list(points[start:start + max_results + 1])
    more = len(rows) > max_results
    history = [shapes.metric(key, v, w, s) for v, w, s in rows[:max_results]]
    return history, (search.page_token(start + max_results) if more else None)


EXPERIMENT_DEFAULT_ORDER = ["creation_time DESC", "experiment_id ASC"]


def search_experiments(token: ApiToken, filter_string: str, order_by: list[str], max_results: int,
                       page_token: str) -> tuple[list[dict], str | None]:
    """The team's experiments matching ``filter_string`` (attributes ``name``,
    ``experiment_id``, ``creation_time``, ``last_update_time`` and tags), newest first
    unless ``order_by`` says otherwise, as ``experiments/search`` answers them."""
    kinds = {"attributes": search.EXPERIMENT_ATTRIBUTES, "types": search.EXPERIMENT_TYPES}
    comparisons = search.parse_filter(filter_string, numeric=search.EXPERIMENT_NUMERIC_ATTRIBUTES,
                                      listed="experiment_id", **kinds)
    orders = search.parse_order_by(order_by or EXPERIMENT_DEFAULT_ORDER, **kinds)
    search.offset_of(page_token)
    found = []
    for exp in MlflowExperiment.objects.filter(team=token.team_id):
        shaped = shapes.experiment(exp)
        found.append(search.Searched(info=shaped, tags=dict(exp.tags), payload=shaped))
    matching = [e for e in found if search.matches(e, comparisons)]
    page, next_token = search.page(search.sort(matching, orders), page_token, max_results)
    return [e.payload for e in page], next_token
