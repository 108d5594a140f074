from django.contrib import admin

from opdweb.traces.models import TraceSeries


@admin.register(TraceSeries)
class TraceSeriesAdmin(admin.ModelAdmin):
    """Points and rollups have composite keys, which the admin cannot edit; a series'
    points are read through the job page and the export endpoints."""

    list_display = ["job", "key", "first_step", "last_step"]
    list_filter = ["key"]
    search_fields = ["key"]
    raw_id_fields = ["job"]
