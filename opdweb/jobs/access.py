"""Which job a user may see or act on: one lookup, one role check, for the API and the pages."""
from __future__ import annotations

from django.http import Http404

from opdweb.jobs.models import Job
from opdweb.refusals import Refused
from opdweb.teams.access import role_in
from opdweb.teams.models import Role


def visible_job(user, job_id: int, min_role: Role = Role.VIEWER) -> Job:
    """The job, if ``user`` holds at least ``min_role`` in its team.  Someone outside the
    team gets a 404 (other teams' jobs are never revealed); a team member whose role is too
    low gets a 403."""
    job = Job.objects.select_related("team", "created_by").filter(pk=job_id).first()
    role = role_in(user, job.team_id) if job is not None else None
    if role is None:
        raise Http404(f"job #{job_id} not found")
    if role < min_role:
        raise Refused(f"your role in team {job.team.slug} cannot do this (needs {min_role.label})", status=403)
    job.viewer_role = role
    return job


def may_see_traceback(user, role: Role | None) -> bool:
    """A failed job's traceback shows code paths and host details: members and up (and
    staff) see it, viewers see the error line only."""
    return user.is_staff or (role is not None and role >= Role.MEMBER)
