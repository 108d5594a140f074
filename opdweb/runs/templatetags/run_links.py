"""``{% run_link_of job as run %}``: an external run's link, chart guides and mapped
metrics for its page, which the jobs app shows without importing this one."""
from __future__ import annotations

from django import template

from opdweb.runs.linking import page_context
from opdweb.runs.metric_map import MULTIPLE_KEY
from opdweb.runs.watch import budget_points, first_breach_step, rule_for
from opdweb.traces.models import TraceSeries
from workers.science.kinds import Kind

register = template.Library()


@register.simple_tag
def run_link_of(job) -> dict:
    """See :func:`opdweb.runs.linking.page_context`; with the watch's marks on the multiple's
    chart: the budget between calibrated steps, and the step it was first breached at."""
    context = page_context(job, list(TraceSeries.objects.filter(job=job).values_list("key", flat=True)))
    guide = context.get("chart_guides", {}).get(MULTIPLE_KEY)
    link = context.get("run_link")
    if guide is not None and link is not None:
        points = budget_points(link.budget)
        if len(points) > 1:  # budgets at several calibrated steps: the line between them, in logged steps
            updates = rule_for(job).updates_per_step
            guide["points"] = [(step / updates, value) for step, value in points]
            guide["label"] += ", between calibrated steps" + (f" ({updates} updates per step)" if updates > 1 else "")
        breached = first_breach_step(job)
        if breached is not None:
            guide["breached_step"] = breached
    return context


@register.simple_tag
def run_alerts_of(job) -> list:
    """The run's alerts, newest first (the run page's list)."""
    from opdweb.runs.models import Alert

    return list(Alert.objects.filter(job=job)[:50])


@register.simple_tag
def watch_rule_of(job) -> dict:
    """The rule watching the run: ``rule``, and ``own`` whether it is the run's own (else
    the team's default, or the defaults where the team set none)."""
    from opdweb.runs.watch import rule_for

    rule = rule_for(job)
    return {"rule": rule, "own": rule.job_id == job.pk, "team_set": rule.pk is not None and rule.job_id is None}


@register.simple_tag
def open_alert_count(job) -> int:
    """Alerts of the run not acknowledged (the job list's badge); 0 for other kinds."""
    from opdweb.runs.models import Alert

    return Alert.objects.filter(job=job, acknowledged_at__isnull=True).count() if job.kind == Kind.EXTERNAL else 0


@register.simple_tag
def runs_under_approval(approval) -> list[dict]:
    """See :func:`opdweb.runs.watch.runs_under`."""
    from opdweb.runs.watch import runs_under

    return runs_under(approval)


@register.simple_tag
def run_files_of(job) -> list:
    """The files an MLflow run uploaded (path, size), for its page; [] for other jobs."""
    from opdweb.runs.mlflow_artifacts import files_of

    run = getattr(job, "mlflow_run", None) if job.kind == Kind.EXTERNAL else None
    return files_of(run)[:500] if run is not None else []


@register.simple_tag
def wandb_run_of(job) -> dict | None:
    """What a run logged with the ``wandb`` client shows on its page: its W&B id and project,
    group, tags, notes, config (W&B's own ``_wandb`` key left out), summary (``_`` keys left
    out) and its own alerts (``wandb.alert``); None for other jobs."""
    from opdweb.runs.models import TrainerAlert, WandbRun

    if job.kind != Kind.EXTERNAL:
        return None
    wb = WandbRun.objects.select_related("experiment").filter(run__job=job).first()
    if wb is None:
        return None
    config = sorted((k, v.get("value") if isinstance(v, dict) else v) for k, v in wb.config.items()
                    if not k.startswith("_"))
    summary = sorted((k, v) for k, v in wb.summary.items() if not k.startswith("_"))
    return {"run": wb, "config": config[:500], "summary": summary[:500],
            "alerts": list(TrainerAlert.objects.filter(job=job)[:100])}
