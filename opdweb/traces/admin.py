from django.contrib import admin
from django.utils.html import format_html

from opdweb.traces.models import TracePoint, TraceSeries


@admin.register(TraceSeries)
class TraceSeriesAdmin(admin.ModelAdmin):
    """Points and rollups have composite primary keys, which Django's admin refuses to
    register; each series shows its point count and links to the full export instead."""

    list_display = ["job", "key", "first_step", "last_step"]
    list_filter = ["key"]
    search_fields = ["key"]
    raw_id_fields = ["job"]
    readonly_fields = ["points"]

    @admin.display(description="points")
    def points(self, series: TraceSeries):
        count = TracePoint.objects.filter(series_id=series.pk).count()
        return format_html('{} points · <a href="/api/jobs/{}/export?format=csv&key={}">export CSV</a>',
                           count, series.job_id, series.key)
