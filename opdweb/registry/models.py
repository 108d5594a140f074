"""The models a team works with: checkpoints and hub ids registered once, validated when
registered, and picked by name in the job and approval forms."""
from __future__ import annotations

from django.conf import settings
from django.db import models

#: What the forms suggest for ``kind``; any short label is accepted.
SUGGESTED_KINDS = ("student", "teacher", "checkpoint")


class RegisteredModel(models.Model):
    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="registered_models")
    name = models.CharField(max_length=200)
    path = models.CharField(max_length=1000)  # the resolved checkpoint directory, or a hub id
    kind = models.CharField(max_length=40)
    digest = models.CharField(max_length=128, blank=True)  # of the weights; empty for a hub id
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="registered_model_name_unique_in_team"),
            models.UniqueConstraint(fields=["team", "path"], name="registered_model_path_unique_in_team"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.path})"
