"""A job's result in a few words, for the job list's result column and a parent's children
table: the verdict and multiple of a check, the multiple of a measurement, the final
accuracy of a training run, a calibration's budget, each multiple with the unit pair it is
of (where the result names it).  Read from a handful of the result's
keys, extracted by the database (:func:`with_result_keys`), so a list of thousands of jobs
never loads their whole results; which words follow from which keys the result carries,
never from the kind's name."""
from __future__ import annotations

from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.fields.json import KT

from opdweb import numbers
from opdweb.traces.models import TraceSeries
from workers.science.budget.results import NO_BUDGET
from workers.science.results import unit_pair

#: The result keys a summary reads, each annotated as ``summary_<key>``.
RESULT_KEYS = ("status", "budget", "verdict", "multiple", "final_accuracy")
#: Where a result names its unit pair: a measurement's ``unit``, a budget's own fields.
PAIR_KEYS = {"engine": ("unit__engine", "unit_engine"), "trainer": ("unit__trainer", "unit_trainer")}


def with_result_keys(jobs: QuerySet) -> QuerySet:
    """The result keys, and for a job without a result (an MLflow or W&B run, a job still
    running) its curves: how many series it has and its newest step."""
    series = TraceSeries.objects.filter(job=OuterRef("pk"))
    return jobs.annotate(
        **{f"summary_{key}": KT(f"result__{key}") for key in RESULT_KEYS},
        **{f"summary_{half}_{i}": KT(f"result__{path}") for half, paths in PAIR_KEYS.items()
           for i, path in enumerate(paths)},
        summary_series=Subquery(series.values("job").annotate(n=Count("pk")).values("n")),
        summary_last_step=Subquery(series.order_by("-last_step").values("last_step")[:1]))


def summary(job) -> str:
    """``job``'s result in a few words ('' while it has none); ``job`` carries the
    annotations of :func:`with_result_keys`."""
    values = {key: getattr(job, f"summary_{key}", None) for key in RESULT_KEYS}
    status, budget, verdict, multiple, accuracy = (values[k] for k in RESULT_KEYS)
    if status in NO_BUDGET:
        return f"{str(status).replace('_', ' ')}: no budget"
    of = _pair(job)
    if status in ("reached", "not_reached", "below_ladder"):
        return f"budget {numbers.budget(_number(budget), status)}{of}"
    if verdict:
        return f"{str(verdict).replace('_', ' ')} at {numbers.multiple(_number(multiple))}{of}"  # not shown safe at 40×
    if multiple is not None:
        return numbers.multiple(_number(multiple)) + of
    if accuracy is not None:
        value = _number(accuracy)
        return f"accuracy {numbers.significant(100 * value)} %" if value is not None else ""
    series, step = getattr(job, "summary_series", None), getattr(job, "summary_last_step", None)
    if series:
        return f"step {step:,} · {series} series"
    return ""


def _pair(job) -> str:
    """`` (vllm BF16 engine / bf16 trainer)`` where the result names its unit, else ''."""
    engine, trainer = (getattr(job, f"summary_{half}_0", None) or getattr(job, f"summary_{half}_1", None)
                       for half in PAIR_KEYS)
    return f" ({unit_pair(engine, trainer)})" if engine else ""


def _number(text) -> float | None:
    """A JSON number extracted as text (``KT``), back as a float."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def child_rows(parent) -> list[dict]:
    """The parent's child jobs as its children table shows them, oldest first."""
    prefix = f"{parent.name or f'#{parent.pk}'}: "
    children = with_result_keys(parent.children.only("id", "child_key", "name", "kind", "state", "progress"))
    return [{"id": c.pk, "key": c.child_key, "label": c.name.removeprefix(prefix), "kind": c.kind, "state": c.state,
             "progress": c.progress, "summary": summary(c)} for c in children.order_by("id")]
