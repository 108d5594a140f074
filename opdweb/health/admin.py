from django.contrib import admin

from opdweb.health.models import WorkerPresence


@admin.register(WorkerPresence)
class WorkerPresenceAdmin(admin.ModelAdmin):
    list_display = ["name", "device", "queues", "last_seen", "stopped"]
