"""Which job a user may see or act on: one query for the job and the user's role in its
team, for the API and the pages."""
from __future__ import annotations

from django.db.models import OuterRef, Subquery
from django.http import Http404

from opdweb.jobs.models import Job
from opdweb.refusals import Refused
from opdweb.teams.models import Membership, Role


def visible_job(user, job_id: int, min_role: Role = Role.VIEWER) -> Job:
    """The job, if ``user`` holds at least ``min_role`` in its team.  Someone outside the
    team gets a 404 (other teams' jobs are never revealed); a team member whose role is too
    low gets a 403."""
    job = None
    if user.is_authenticated:  # one query: the job, its team and creator, and the user's role in that team
        role = Membership.objects.filter(team=OuterRef("team"), user=user).values("role")[:1]
        job = Job.objects.select_related("team", "created_by").annotate(role=Subquery(role)).filter(pk=job_id).first()
    role = Role(job.role) if job is not None and job.role is not None else None
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
