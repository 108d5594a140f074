from django import forms
from django.contrib import admin

from opdweb.approvals.models import ApprovalRequest, TeamWebhook, WebhookDelivery


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(admin.ModelAdmin):
    list_display = ["id", "config", "checkpoint", "team", "state", "requested_by", "decided_by"]
    list_filter = ["state", "team"]
    raw_id_fields = ["config", "admission_job", "budget", "breached_by"]


class TeamWebhookForm(forms.ModelForm):
    """The signing secret is written, never shown: a password field left empty, which
    keeps the current secret when saved empty."""

    url = forms.URLField(max_length=1000, assume_scheme="https")
    secret = forms.CharField(widget=forms.PasswordInput(render_value=False), required=False, max_length=200,
                             help_text="Never shown. Leave empty to keep the current secret.")

    class Meta:
        model = TeamWebhook
        fields = ["team", "url", "secret"]

    def clean_secret(self) -> str:
        secret = self.cleaned_data["secret"]
        if secret:
            return secret
        if self.instance.pk:
            return self.instance.secret
        raise forms.ValidationError("A new webhook needs a secret.")


@admin.register(TeamWebhook)
class TeamWebhookAdmin(admin.ModelAdmin):
    form = TeamWebhookForm
    list_display = ["team", "url", "updated_at"]

    def get_fields(self, request, obj=None):
        """Without the right to change it, the form is read-only, and a read-only field
        shows its value: leave the secret out there."""
        fields = super().get_fields(request, obj)
        return fields if self.has_change_permission(request, obj) else [f for f in fields if f != "secret"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ["id", "team", "event", "state", "attempts", "last_status", "created_at"]
    list_filter = ["state", "event"]
