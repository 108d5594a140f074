"""A personal API token: its owner, the one team it reaches, whether it may write, and the
sha256 digest of its secret (the secret itself is shown once, at creation, and never stored)."""
from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    can_write = models.BooleanField(default=False)
    # sha256 of the whole secret, hex: looked up by equality, so a guess costs a lookup and
    # reveals nothing about any stored secret.
    digest = models.CharField(max_length=64, unique=True)
    # The secret's first characters, for people to tell tokens apart ("opd_Xa3k…").
    hint = models.CharField(max_length=16)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…, {self.scope})"

    @property
    def scope(self) -> str:
        return "read-write" if self.can_write else "read-only"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None
