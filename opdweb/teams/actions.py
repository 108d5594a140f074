"""What team admins do to memberships and the team's settings.  Each change is audited; a
team always keeps at least one admin, so nobody can lock a team out of its own settings."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from opdweb.refusals import Refused
from opdweb.teams import audit
from opdweb.teams.models import BudgetCriterion, Membership, Role, Team


def check_role(value) -> Role:
    try:
        return Role(int(value))
    except (TypeError, ValueError):
        names = ", ".join(f"{r.value} ({r.label})" for r in Role)
        raise Refused(f"role must be one of {names}", details=[{"field": "role", "message": "unknown role"}]) from None


def _other_admins(team, membership: Membership) -> int:
    return Membership.objects.filter(team=team, role=Role.ADMIN).exclude(pk=membership.pk).count()


def do_add_member(*, team, actor, username: str, role) -> Membership:
    role = check_role(role)
    user = get_user_model().objects.filter(username=(username or "").strip()).first()
    if user is None:
        raise Refused(f"no user named {username!r}", details=[{"field": "username", "message": "no such user"}])
    with transaction.atomic():
        if Membership.objects.filter(team=team, user=user).exists():
            raise Refused(f"{user.username} is already in team {team.slug}", status=409)
        membership = Membership.objects.create(team=team, user=user, role=role)
        audit.record(team, actor, audit.MEMBER_ADDED, f"added {user.username} as {role.label}",
                     subject="membership", subject_id=membership.pk, user=user.username, role=role.label)
    return membership


def do_invite_user(*, team, actor, username: str, role) -> tuple[Membership, str]:
    """A new user, member of ``team`` with ``role``, who has no password yet; returns the
    membership and the path of the one-time link where they set one (Django's password
    reset token: it stops working once a password is set, and after PASSWORD_RESET_TIMEOUT)."""
    role = check_role(role)
    username = (username or "").strip()
    users = get_user_model()
    try:
        users._meta.get_field("username").run_validators(username)
        if not username:
            raise ValidationError("a username is required")
    except ValidationError as exc:
        raise Refused(f"username {username!r}: {' '.join(exc.messages)}",
                      details=[{"field": "username", "message": " ".join(exc.messages)}]) from None
    taken = Refused(f"{username} already has an account: add them as a member instead", status=409,
                    details=[{"field": "username", "message": "taken"}])
    try:
        with transaction.atomic():
            if users.objects.filter(username__iexact=username).exists():
                raise taken
            user = users(username=username)
            user.set_unusable_password()
            user.save()
            membership = Membership.objects.create(team=team, user=user, role=role)
            audit.record(team, actor, audit.MEMBER_INVITED, f"invited {username} as {role.label}",
                         subject="membership", subject_id=membership.pk, user=username, role=role.label)
    except IntegrityError:
        # The same name (in any case) invited at the same time: the database's unique
        # index on lower(username) (teams migration 0003) let one through.
        raise taken from None
    link = reverse("set_password", kwargs={"uidb64": urlsafe_base64_encode(force_bytes(user.pk)),
                                           "token": default_token_generator.make_token(user)})
    return membership, link


def _membership(team, membership_id: int) -> Membership:
    membership = Membership.objects.select_for_update().select_related("user").filter(
        team=team, pk=membership_id).first()
    if membership is None:
        raise Refused(f"membership #{membership_id} is not in team {team.slug}", status=404)
    return membership


def do_change_role(*, team, actor, membership_id: int, role) -> Membership:
    role = check_role(role)
    with transaction.atomic():
        # Lock the team's admins first: two admins demoting each other at once cannot both succeed.
        list(Membership.objects.select_for_update().filter(team=team, role=Role.ADMIN))
        membership = _membership(team, membership_id)
        if membership.role == Role.ADMIN and role != Role.ADMIN and _other_admins(team, membership) == 0:
            raise Refused(f"{membership.user.username} is the last admin of team {team.slug}; "
                          "make someone else admin first", status=409)
        before = Role(membership.role)
        membership.role = role
        membership.save(update_fields=["role"])
        audit.record(team, actor, audit.MEMBER_ROLE_CHANGED,
                     f"changed {membership.user.username} from {before.label} to {role.label}",
                     user=membership.user.username, before=before.label, after=role.label)
    return membership


def do_remove_member(*, team, actor, membership_id: int) -> None:
    with transaction.atomic():
        list(Membership.objects.select_for_update().filter(team=team, role=Role.ADMIN))
        membership = _membership(team, membership_id)
        if membership.role == Role.ADMIN and _other_admins(team, membership) == 0:
            raise Refused(f"{membership.user.username} is the last admin of team {team.slug}; "
                          "make someone else admin first", status=409)
        membership.delete()
        audit.record(team, actor, audit.MEMBER_REMOVED, f"removed {membership.user.username}",
                     user=membership.user.username)


def do_set_budget_criterion(*, team, actor, criterion) -> Team:
    """Which criterion the team's admission checks are judged under (strict or the paper's
    mean drop): checks submitted from now on take their budget under it; earlier ones keep
    theirs."""
    if criterion not in BudgetCriterion.values:
        names = ", ".join(BudgetCriterion.values)
        raise Refused(f"budget criterion must be one of {names} (got {criterion!r})",
                      details=[{"field": "budget_criterion", "message": "unknown criterion"}])
    with transaction.atomic():
        locked = Team.objects.select_for_update().get(pk=team.pk)
        before = locked.budget_criterion
        locked.budget_criterion = criterion
        locked.save(update_fields=["budget_criterion"])
        audit.record(team, actor, audit.BUDGET_CRITERION_CHANGED,
                     f"admission checks judged under the {criterion} criterion (was {before})",
                     before=before, after=criterion)
    return locked
