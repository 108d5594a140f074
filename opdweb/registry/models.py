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
    digest = models.CharField(max_length=128, blank=True)  # of the weights; empty for a hub id or until read
    #: the worker's ``describe`` job that reads its content (the web process never does)
    describe_job = models.ForeignKey("jobs.Job", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
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


class CheckpointDescription(models.Model):
    """What a worker read of a checkpoint reference (a ``describe`` job's result): the
    product's only knowledge of a checkpoint's content.  The newest one of a reference is
    current; approvals and exports compare digests with it and read its facts."""

    uri = models.CharField(max_length=1000, db_index=True)  # a local path under the model roots, or s3://
    digest = models.CharField(max_length=64)
    # The digest with the trainer state files (optimizer, scheduler), as the product computed
    # it before December 2026: hashes stored then still name this content.  Blank on a
    # description read then, whose ``digest`` is that hash.
    digest_with_trainer_state = models.CharField(max_length=64, blank=True)
    tokenizer_digest = models.CharField(max_length=64, blank=True)
    facts = models.JSONField(default=dict)
    files = models.IntegerField(default=0)
    bytes = models.BigIntegerField(default=0)
    problems = models.JSONField(default=list)
    import_note = models.CharField(max_length=2000, blank=True)
    config_json = models.JSONField(default=dict)  # its config.json (attention geometry for KV capacity)
    job = models.ForeignKey("jobs.Job", on_delete=models.SET_NULL, null=True, related_name="+")
    described_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-described_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.uri} @ {self.digest[:12]}"
