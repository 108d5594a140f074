from django.contrib import admin

from opdweb.runs.models import Alert, WatchRule


@admin.register(WatchRule)
class WatchRuleAdmin(admin.ModelAdmin):
    """A team's default rule (no job) or one run's own."""

    list_display = ["id", "team", "job", "consecutive_steps", "growth_per_1k_steps", "ess_floor", "silence_seconds"]
    list_filter = ["team"]
    raw_id_fields = ["job"]


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ["id", "job", "kind", "step", "value", "threshold", "created_at", "recovered_at", "acknowledged_at"]
    list_filter = ["kind"]
    raw_id_fields = ["job", "acknowledged_by"]
