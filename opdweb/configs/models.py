"""Rollout configs as team objects, the approvals that clear one for a checkpoint, and the
team's webhook with its delivery log (the audit log is the team's: :mod:`opdweb.teams.audit`).

A :class:`RolloutConfigRecord` is immutable: its content is the canonical config (every
default filled in) and its identity within a team the sha256 of that content, so editing
makes a new record and the same config written twice is one record.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models


class ImmutableConfig(Exception):
    pass


class RolloutConfigRecord(models.Model):
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="rollout_configs")
    name = models.CharField(max_length=200)
    config = models.JSONField(help_text="the validated RolloutConfig with every default filled in")
    config_hash = models.CharField(max_length=64, help_text="sha256 of the canonical JSON of config")
    derived_from = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
                                     help_text="the record this one was edited from")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["team", "config_hash"], name="one_record_per_config_per_team")]

    def __str__(self) -> str:
        return f"{self.name} ({self.short_hash})"

    @property
    def short_hash(self) -> str:
        return self.config_hash[:12]

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise ImmutableConfig("a rollout config is immutable; editing it makes a new one")
        super().save(*args, **kwargs)


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
    config = models.ForeignKey(RolloutConfigRecord, on_delete=models.PROTECT, related_name="approval_requests")
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

    class Meta:
        ordering = ["-requested_at"]
        indexes = [models.Index(fields=["team", "state"])]
        constraints = [models.UniqueConstraint(fields=["config", "checkpoint"], condition=models.Q(state="pending"),
                                               name="one_pending_request_per_config_and_checkpoint")]

    def __str__(self) -> str:
        return f"approval #{self.pk} of {self.config} for {self.checkpoint} ({self.state})"


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


class WebhookDelivery(models.Model):
    """One event to post; each attempt updates the row, so the log shows how it went."""

    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="webhook_deliveries")
    event = models.CharField(max_length=40)
    url = models.URLField(max_length=1000)
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
