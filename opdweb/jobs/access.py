"""Which job a user may see or act on, for the API and the pages (the team rule of
:mod:`opdweb.teams.access`)."""
from __future__ import annotations

from opdweb.jobs.models import Job
from opdweb.teams.access import visible_in_team
from opdweb.teams.models import Role


def visible_job(user, job_id: int, min_role: Role = Role.VIEWER) -> Job:
    """The job, if ``user`` holds at least ``min_role`` in its team (404 outside it, 403 below)."""
    return visible_in_team(Job, "job", user, job_id, min_role, related=("created_by",))


def may_see_traceback(user, role: Role | None) -> bool:
    """A failed job's traceback shows code paths and host details: members and up (and
    staff) see it, viewers see the error line only."""
    return user.is_staff or (role is not None and role >= Role.MEMBER)
