"""Who may see and do what: the one place team scoping is decided.

The rule for a team's object (a job, a config, an approval, the team itself): someone
outside the team gets a 404 (other teams' objects are never revealed); a member whose
role is too low gets a 403.

A request authenticated by an API token (``user.api_token``, set by
:mod:`opdweb.tokens.authentication`) reaches the token's one team only: the user's other
teams are as if they were not theirs, except that an object there is refused with a 403
saying so (the owner may see it with another token or the session, so nothing is revealed).
"""
from __future__ import annotations

from django.db.models import Model, OuterRef, QuerySet, Subquery
from django.http import Http404

from opdweb.refusals import Refused
from opdweb.teams.models import Membership, Role, Team


def token_team_id(user) -> int | None:
    """The one team a token-authenticated user may reach; None for a session."""
    token = getattr(user, "api_token", None)
    return token.team_id if token is not None else None


def _outside_token_team(user, team_slug: str, what: str) -> Refused:
    token = user.api_token
    return Refused(f"API token {token.name!r} is for team {token.team.slug}; {what} is in team {team_slug}",
                   status=403)


def teams_of(user, min_role: Role = Role.VIEWER) -> QuerySet[Team]:
    """Teams in which ``user`` holds at least ``min_role`` (only the token's, for a token)."""
    if not user.is_authenticated:
        return Team.objects.none()
    teams = Team.objects.filter(memberships__user=user, memberships__role__gte=min_role)
    scope = token_team_id(user)
    return teams if scope is None else teams.filter(pk=scope)


def role_in(user, team_id: int) -> Role | None:
    scope = token_team_id(user)
    if scope is not None and scope != team_id:
        return None
    return _membership_role(user, team_id)


def _membership_role(user, team_id: int) -> Role | None:
    if not user.is_authenticated:
        return None
    role = Membership.objects.filter(user=user, team_id=team_id).values_list("role", flat=True).first()
    return Role(role) if role is not None else None


def has_role(user, team_id: int, min_role: Role) -> bool:
    role = role_in(user, team_id)
    return role is not None and role >= min_role


def _at_least(role: Role, min_role: Role, slug: str) -> Role:
    if role < min_role:
        raise Refused(f"your role in team {slug} cannot do this (needs {min_role.label})", status=403)
    return role


def role_of_user(user, team: str = "team") -> Subquery:
    """``user``'s role in the team at ``team`` (a path from the queried model), as an
    annotation: None where they hold none."""
    return Subquery(Membership.objects.filter(team=OuterRef(team), user=user).values("role")[:1])


def viewer_role(user, what: str, team_id: int, team_slug: str, role: int | None,
                min_role: Role = Role.VIEWER) -> Role:
    """The rule above for one object (``what``), given its team and ``user``'s role there
    (None: none): their role, else the 404 or 403."""
    if role is None:
        raise Http404(f"{what} not found")
    scope = token_team_id(user)
    if scope is not None and team_id != scope:
        raise _outside_token_team(user, team_slug, what)
    return _at_least(Role(role), min_role, team_slug)


def visible_in_team(model: type[Model], what: str, user, pk: int, min_role: Role = Role.VIEWER,
                    related: tuple[str, ...] = ()):
    """The ``model`` row ``pk`` with ``viewer_role`` set, under the rule above.  One query:
    the object, its team and ``related``, and the user's role in that team."""
    obj = None
    if user.is_authenticated:
        obj = model.objects.select_related("team", *related).annotate(role=role_of_user(user)).filter(pk=pk).first()
    if obj is None:
        raise Http404(f"{what} #{pk} not found")
    obj.viewer_role = viewer_role(user, f"{what} #{pk}", obj.team_id, obj.team.slug, obj.role, min_role)
    return obj


def team_for(user, slug: str, min_role: Role = Role.VIEWER) -> Team:
    """The team named ``slug`` with ``viewer_role`` set, under the rule above."""
    team = Team.objects.filter(slug=slug).first()
    if team is None:
        raise Http404(f"team {slug!r} not found")
    team.viewer_role = viewer_role(user, f"team {slug!r}", team.pk, slug, _membership_role(user, team.pk), min_role)
    return team
