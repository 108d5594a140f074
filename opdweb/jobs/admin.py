from django.contrib import admin

from opdweb.jobs.models import Job, JobLogEntry


class JobLogEntryInline(admin.TabularInline):
    model = JobLogEntry
    extra = 0
    readonly_fields = ["created_at", "level", "message"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "name", "team", "state", "progress", "worker", "created_at"]
    list_filter = ["kind", "state", "team"]
    search_fields = ["name", "kind", "worker"]
    readonly_fields = ["created_at", "started_at", "finished_at", "heartbeat_at"]
    inlines = [JobLogEntryInline]


@admin.register(JobLogEntry)
class JobLogEntryAdmin(admin.ModelAdmin):
    list_display = ["job", "created_at", "level", "message"]
    list_filter = ["level"]
    raw_id_fields = ["job"]
