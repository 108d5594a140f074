from django.conf import settings
from django.db import models


class HomeVisit(models.Model):
    """A person's visits to the home page: "since your last visit" counts from ``previous``,
    the visit before the current one (page loads within ``VISIT_GAP`` of each other are
    one visit, so a reload shows the same window)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="home_visit")
    previous = models.DateTimeField(null=True, blank=True)
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.user_id} at {self.seen_at:%Y-%m-%d %H:%M}"
