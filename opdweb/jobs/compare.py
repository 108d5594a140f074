"""Several jobs side by side: which config parameters differ, their headline metrics,
and the trace keys they share (drawn overlaid by the compare page)."""
from __future__ import annotations

import json
import math
from collections import Counter

from opdweb.jobs.access import visible_job
from opdweb.jobs.history import history_reads
from opdweb.jobs.models import Job
from opdweb.refusals import Refused
from opdweb.traces.models import ROLLUP_WIDTHS, TraceRollup, TraceSeries

MAX_COMPARED = 10

# Result fields worth a row, in the order people read them; only those some job has appear.
RESULT_METRICS = ("verdict", "multiple", "multiple_ci", "margin", "metric", "value", "reference_value", "tokens",
                  "prompts", "accuracy", "reference_accuracy", "kv_capacity_gain", "diverged_fraction", "steps")

MISSING = "—"
#: Shared trace keys summed up in the metrics table (last, min, max); all of them are drawn.
MAX_SERIES_ROWS = 50


def parse_compared_ids(values: list[str], what: str = "jobs") -> list[int]:
    """Ids from ``?ids=1,2,3`` (or repeated ``ids``), in the order given, without repeats:
    at least 2 and at most :data:`MAX_COMPARED`, or a 400 saying what is wrong."""
    ids: list[int] = []
    for part in (p.strip() for value in values for p in value.split(",")):
        if not part:
            continue
        if not part.isdigit() or len(part) > 18:
            raise Refused(f"{what[:-1]} ids are whole numbers; got {part[:40]!r}")
        if int(part) not in ids:
            ids.append(int(part))
    if len(ids) < 2:
        raise Refused(f"choose at least 2 {what} to compare (ids=1,2)")
    if len(ids) > MAX_COMPARED:
        raise Refused(f"compare at most {MAX_COMPARED} {what} at once; got {len(ids)}")
    return ids


def compared_jobs(user, ids: list[int]) -> list[Job]:
    """The jobs, each one the user may see (another team's id is a 404, as everywhere)."""
    return [visible_job(user, job_id) for job_id in ids]


def flatten(value, prefix: str = "") -> dict[str, str]:
    """Nested config as ``{"a.b": "value as JSON"}``: one row per leaf, lists kept whole."""
    if isinstance(value, dict) and value:
        flat: dict[str, str] = {}
        for key, item in value.items():
            flat.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix or "(config)": json.dumps(value, sort_keys=True)}


def parameter_rows(configs: list[dict]) -> list[dict]:
    """Every flattened key of any of the configs, with each one's value and whether the
    values differ (a key one config lacks differs)."""
    flats = [flatten(config) for config in configs]
    keys = sorted(set().union(*flats))
    rows = []
    for key in keys:
        values = [flat.get(key, MISSING) for flat in flats]
        rows.append({"key": key, "values": values, "differs": len(set(values)) > 1})
    return rows


def metric_rows(jobs: list[Job]) -> list[dict]:
    """The headline result fields any job has, each job's value or a dash."""
    results = [job.result if isinstance(job.result, dict) else {} for job in jobs]
    return [{"key": key, "values": [results_value(r, key) for r in results]}
            for key in RESULT_METRICS if any(key in r for r in results)]


def results_value(result: dict, key: str):
    value = result.get(key, MISSING)
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:.4g}"
    return value


def compared_series(jobs: list[Job]) -> dict:
    """Trace keys that at least two of the jobs have (the curves worth overlaying), and per
    job the batched reads of those of them it has (``{job id: [url, ...]}``)."""
    held = list(TraceSeries.objects.filter(job__in=jobs).order_by("key").values_list("job_id", "key"))
    counts = Counter(key for _, key in held)
    shared = sorted(key for key, n in counts.items() if n >= 2)
    keys_of: dict[int, list[str]] = {job.pk: [] for job in jobs}
    for job_id, key in held:
        if counts[key] >= 2:
            keys_of[job_id].append(key)
    return {"trace_keys": shared,
            "trace_reads": {job_id: history_reads(job_id, keys) for job_id, keys in keys_of.items()}}


def series_rows(jobs: list[Job], keys: list[str]) -> list[dict]:
    """For each shared trace key (the first ``MAX_SERIES_ROWS``), each job's last value and
    its min and max over the whole series: read from the coarsest rollup level (a bucket of
    2^22 steps, so one or a few rows per series, however long).  NaN orders above every
    number, as in the charts' bands: a series that logged a NaN has the max NaN, which is
    what the reader of a loss wants to see."""
    keys = keys[:MAX_SERIES_ROWS]
    ids = {(job_id, key): pk for pk, job_id, key in
           TraceSeries.objects.filter(job__in=jobs, key__in=keys).values_list("pk", "job_id", "key")}
    spans: dict[int, list[float]] = {}  # series id -> [min, max, last]
    buckets = (TraceRollup.objects.filter(series_id__in=ids.values(), level=len(ROLLUP_WIDTHS) - 1)
               .order_by("series_id", "bucket").values_list("series_id", "min", "max", "last_value"))
    for series_id, low, high, last in buckets:
        span = spans.setdefault(series_id, [low, high, last])
        span[0], span[1], span[2] = _least(span[0], low), _most(span[1], high), last
    return [{"key": key, "values": [_span_text(spans.get(ids.get((job.pk, key), -1))) for job in jobs]}
            for key in keys]


# Ordered as PostgreSQL orders NaN, above every number, as the rollups are (opdweb.traces.rollups).
def _least(a: float, b: float) -> float:
    return b if math.isnan(a) else a if math.isnan(b) else min(a, b)


def _most(a: float, b: float) -> float:
    return a if math.isnan(a) else b if math.isnan(b) else max(a, b)


def _span_text(span: list[float] | None) -> str:
    if span is None:
        return MISSING
    low, high, last = span
    return f"{last:.4g} (min {low:.4g}, max {high:.4g})"
