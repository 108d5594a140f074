from django.contrib import admin

from opdweb.approvals.models import ApprovalRequest, TeamWebhook, WebhookDelivery


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(admin.ModelAdmin):
    list_display = ["id", "config", "checkpoint", "team", "state", "requested_by", "decided_by"]
    list_filter = ["state", "team"]
    raw_id_fields = ["config", "admission_job", "budget", "breached_by"]


@admin.register(TeamWebhook)
class TeamWebhookAdmin(admin.ModelAdmin):
    list_display = ["team", "url", "updated_at"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ["id", "team", "event", "state", "attempts", "last_status", "created_at"]
    list_filter = ["state", "event"]
