from django.contrib import admin

from opdweb.rollouts.models import RolloutConfigRecord


@admin.register(RolloutConfigRecord)
class RolloutConfigRecordAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "team", "config_hash", "created_by", "created_at"]
    list_filter = ["team"]
    search_fields = ["name", "config_hash"]
    readonly_fields = ["config", "config_hash", "created_at"]

    def has_change_permission(self, request, obj=None):
        return False  # immutable: editing makes a new record, in the product
