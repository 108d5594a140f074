"""Which job a user may see or act on, for the API and the pages (the team rule of
:mod:`opdweb.teams.access`)."""
from __future__ import annotations

from django.db.models import F

from opdweb.jobs.models import Job
from opdweb.teams.access import role_of_user, viewer_role, visible_in_team
from opdweb.teams.models import Role
from opdweb.traces.models import TraceSeries


def visible_job(user, job_id: int, min_role: Role = Role.VIEWER) -> Job:
    """The job, if ``user`` holds at least ``min_role`` in its team (404 outside it, 403 below)."""
    return visible_in_team(Job, "job", user, job_id, min_role, related=("created_by",))


def visible_series(user, job_id: int, keys: list[str]) -> dict[str, TraceSeries]:
    """The job's series among ``keys`` (by key; a key it has none of is left out), if
    ``user`` may see the job, else the job's 404.  One query where the job has any of them:
    the series, their job's team and the user's role there (a chart read's, which does
    not need the job itself); where it has none, the job's own check says which 404."""
    found = []
    if user.is_authenticated:
        found = list(TraceSeries.objects.filter(job_id=job_id, key__in=keys)
                     .annotate(team_id=F("job__team_id"), team_slug=F("job__team__slug"),
                               role=role_of_user(user, "job__team")))
    if not found:
        visible_job(user, job_id)
        return {}
    first = found[0]
    viewer_role(user, f"job #{job_id}", first.team_id, first.team_slug, first.role)
    return {series.key: series for series in found}


def may_see_traceback(user, role: Role | None) -> bool:
    """A failed job's traceback shows code paths and host details: members and up (and
    staff) see it, viewers see the error line only."""
    return user.is_staff or (role is not None and role >= Role.MEMBER)
