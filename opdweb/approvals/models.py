"""The approvals that clear a rollout config for a checkpoint, and the team's webhook with
its delivery log (the audit log is the team's: :mod:`opdweb.teams.audit`)."""
from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import models


class ApprovalState(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"


class ApprovalRequest(models.Model):
    """A member asks that a config be cleared for a checkpoint; an approver decides, with
    the latest admission check of that config on that checkpoint as the evidence.  An
    approval keeps what it was granted on (the admission job, its budget and the
    checkpoint's content hash), so it lapses when either changes (:mod:`.currency`)."""

    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="approval_requests")
    config = models.ForeignKey("configs.RolloutConfigRecord", on_delete=models.PROTECT,
                               related_name="approval_requests")
    checkpoint = models.CharField(max_length=1000, help_text="the model path as job configs name it")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    requested_at = models.DateTimeField(auto_now_add=True)
    request_comment = models.TextField(blank=True)

    state = models.CharField(max_length=10, choices=ApprovalState.choices, default=ApprovalState.PENDING)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True)
    # The evidence an approval was granted on.
    admission_job = models.ForeignKey("jobs.Job", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    budget = models.ForeignKey("budgets.MismatchBudget", on_delete=models.PROTECT, null=True, blank=True,
                               related_name="+")
    checkpoint_hash = models.CharField(max_length=64, blank=True)
    # Per export format, the sha256 of the file as approved (the approval page shows the bytes).
    export_hashes = models.JSONField(default=dict, blank=True)
    # The first time a run trained under it went above the budget (the watch's budget rule):
    # the exports say so from then on (:func:`.exporting.provenance_of`).
    breached_at_step = models.BigIntegerField(null=True, blank=True)
    breached_by = models.ForeignKey("jobs.Job", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    breached_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-requested_at"]
        # Named as it was created under the configs app, so existing databases need no change.
        indexes = [models.Index(fields=["team", "state"], name="configs_app_team_id_2f7b83_idx")]
        constraints = [models.UniqueConstraint(fields=["config", "checkpoint"], condition=models.Q(state="pending"),
                                               name="one_pending_request_per_config_and_checkpoint")]

    def __str__(self) -> str:
        return f"approval #{self.pk} of {self.config} for {self.checkpoint} ({self.state})"


def webhook_fingerprint(url: str, secret: str) -> str:
    """Which webhook a delivery was queued for: a digest of its URL and secret (the secret
    itself is kept once, on the webhook)."""
    return hashlib.sha256(f"{url}\0{secret}".encode()).hexdigest()


class TeamWebhook(models.Model):
    """Where a team's approval events are posted, and the secret they are signed with."""

    team = models.OneToOneField("teams.Team", on_delete=models.CASCADE, related_name="webhook")
    url = models.URLField(max_length=1000)
    secret = models.CharField(max_length=200)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"webhook of {self.team}: {self.url}"


class DeliveryState(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"
    DROPPED = "dropped"  # its webhook was removed or changed before it went: recorded, never sent


class WebhookDelivery(models.Model):
    """One event to post; each attempt updates the row, so the log shows how it went."""

    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="webhook_deliveries")
    event = models.CharField(max_length=40)
    url = models.URLField(max_length=1000)
    webhook_fingerprint = models.CharField(max_length=64, blank=True,
                                           help_text="sha256 of the URL and secret it was queued for")
    payload = models.JSONField()
    state = models.CharField(max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_status = models.PositiveIntegerField(null=True, blank=True, help_text="the receiver's HTTP status")
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"{self.event} to {self.url} ({self.state})"
