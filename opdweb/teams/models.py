"""Teams and the roles their members hold.  Every query in the product is team-scoped."""
from django.conf import settings
from django.db import models


class Role(models.IntegerChoices):
    """Ordered: each role can do everything the roles below it can."""

    VIEWER = 10, "viewer"
    MEMBER = 20, "member"
    APPROVER = 30, "approver"
    ADMIN = 40, "admin"


class BudgetCriterion(models.TextChoices):
    """Which criterion a level's accuracy drop must meet for a budget to reach it, when the
    team's admission checks are judged (``workers.science.budget.zones``)."""

    STRICT = "strict", "strict: the upper end of the drop's 95 % interval at most the tolerance"
    MEAN = "mean", "the paper's: the mean drop at most the tolerance"


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # The budget an admission check is judged against: strict by default (a defensible lower bound).
    budget_criterion = models.CharField(max_length=10, choices=BudgetCriterion.choices,
                                        default=BudgetCriterion.STRICT)

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


class AuditEntry(models.Model):
    """Who did what, when, in a team; written in the same transaction as the change.
    ``subject`` and ``subject_id`` name what it was done to (``config`` 12, ``approval`` 3,
    ``membership`` 7), for a link from the log."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="audit_entries")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    action = models.CharField(max_length=40)
    summary = models.CharField(max_length=500)
    subject = models.CharField(max_length=20, blank=True)
    subject_id = models.BigIntegerField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["team", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.action}: {self.summary}"
