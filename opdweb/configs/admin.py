from django.contrib import admin

from opdweb.configs.models import ApprovalRequest, RolloutConfigRecord, TeamWebhook, WebhookDelivery


@admin.register(RolloutConfigRecord)
class RolloutConfigRecordAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "team", "config_hash", "created_by", "created_at"]
    list_filter = ["team"]
    search_fields = ["name", "config_hash"]
    readonly_fields = ["config", "config_hash", "created_at"]

    def has_change_permission(self, request, obj=None):
        return False  # immutable: editing makes a new record, in the product


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(admin.ModelAdmin):
    list_display = ["id", "config", "checkpoint", "team", "state", "requested_by", "decided_by"]
    list_filter = ["state", "team"]
    raw_id_fields = ["config", "admission_job", "budget"]


@admin.register(TeamWebhook)
class TeamWebhookAdmin(admin.ModelAdmin):
    list_display = ["team", "url", "updated_at"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ["id", "team", "event", "state", "attempts", "last_status", "created_at"]
    list_filter = ["state", "event"]
