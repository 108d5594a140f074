"""``{% run_link_of job as run %}``: an external run's link, chart guides and mapped
metrics for its page, which the jobs app shows without importing this one."""
from __future__ import annotations

from django import template

from opdweb.runs.linking import page_context
from opdweb.traces.models import TraceSeries

register = template.Library()


@register.simple_tag
def run_link_of(job) -> dict:
    """See :func:`opdweb.runs.linking.page_context`."""
    return page_context(job, list(TraceSeries.objects.filter(job=job).values_list("key", flat=True)))


@register.simple_tag
def run_alerts_of(job) -> list:
    """The run's alerts, newest first (the run page's list)."""
    from opdweb.runs.models import Alert

    return list(Alert.objects.filter(job=job)[:50])


@register.simple_tag
def open_alert_count(job) -> int:
    """Alerts of the run not acknowledged (the job list's badge); 0 for other kinds."""
    from opdweb.runs.models import Alert

    return Alert.objects.filter(job=job, acknowledged_at__isnull=True).count() if job.kind == "external" else 0


@register.simple_tag
def runs_under_approval(approval) -> list[dict]:
    """See :func:`opdweb.runs.watch.runs_under`."""
    from opdweb.runs.watch import runs_under

    return runs_under(approval)
