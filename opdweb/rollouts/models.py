"""Rollout configs as team objects (the approvals that clear one for a checkpoint are
:mod:`opdweb.approvals`).

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
