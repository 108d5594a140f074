from django.contrib import admin

from opdweb.runs.models import Alert, TrainerAlert, WandbRun, WatchRule


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


@admin.register(WandbRun)
class WandbRunAdmin(admin.ModelAdmin):
    """The W&B face of a run: its id in its project, and what its file stream has sent."""

    list_display = ["id", "name", "experiment", "group", "history_lines", "output_lines"]
    search_fields = ["name", "group"]
    raw_id_fields = ["run", "experiment"]


@admin.register(TrainerAlert)
class TrainerAlertAdmin(admin.ModelAdmin):
    list_display = ["id", "job", "severity", "title", "created_at"]
    list_filter = ["severity"]
    raw_id_fields = ["job"]
