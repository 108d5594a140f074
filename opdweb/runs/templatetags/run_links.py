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
