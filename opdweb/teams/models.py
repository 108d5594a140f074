"""Teams and the roles their members hold.  Every query in the product is team-scoped."""
from django.conf import settings
from django.db import models


class Role(models.IntegerChoices):
    """Ordered: each role can do everything the roles below it can."""

    VIEWER = 10, "viewer"
    MEMBER = 20, "member"
    APPROVER = 30, "approver"
    ADMIN = 40, "admin"


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.IntegerField(choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="one_membership_per_team")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.get_role_display()})"
