"""Team pages: a person's teams, each team's members (whose roles its admins manage) and
its audit log."""
from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from opdweb.pages import answers_refusals
from opdweb.teams.access import team_for
from opdweb.teams.actions import (
    do_add_member,
    do_change_role,
    do_invite_user,
    do_remove_member,
    do_set_budget_criterion,
)
from opdweb.teams.models import AuditEntry, BudgetCriterion, Membership, Role


@login_required
def team_list(request):
    memberships = Membership.objects.filter(user=request.user).select_related("team").order_by("team__name")
    return render(request, "teams/list.html", {"memberships": memberships})


@login_required
def team_detail(request, slug: str):
    team = team_for(request.user, slug)
    members = Membership.objects.filter(team=team).select_related("user").order_by("-role", "user__username")
    return render(request, "teams/detail.html", {"team": team, "members": members, "roles": Role,
                                                 "criteria": BudgetCriterion,
                                                 "is_admin": team.viewer_role >= Role.ADMIN})


@login_required
def audit_log(request, slug: str):
    team = team_for(request.user, slug)
    entries = AuditEntry.objects.filter(team=team).select_related("actor")[:1000]
    return render(request, "teams/audit.html", {"team": team, "entries": entries})


@login_required
@require_POST
@answers_refusals
def member_add(request, slug: str):
    team = team_for(request.user, slug, Role.ADMIN)
    m = do_add_member(team=team, actor=request.user, username=request.POST.get("username", ""),
                      role=request.POST.get("role"))
    messages.info(request, f"{m.user.username} added as {m.get_role_display()}")
    return redirect("teams:detail", slug=slug)


@login_required
@require_POST
@answers_refusals
def member_invite(request, slug: str):
    """A new user in this team; the admin is shown, once, the link where they set a password."""
    team = team_for(request.user, slug, Role.ADMIN)
    m, link = do_invite_user(team=team, actor=request.user, username=request.POST.get("username", ""),
                             role=request.POST.get("role"))
    return render(request, "teams/invited.html", {"team": team, "membership": m,
                                                  "link": request.build_absolute_uri(link),
                                                  "link_days": settings.PASSWORD_RESET_TIMEOUT // 86400})


@login_required
@require_POST
@answers_refusals
def member_role(request, slug: str, membership_id: int):
    team = team_for(request.user, slug, Role.ADMIN)
    m = do_change_role(team=team, actor=request.user, membership_id=membership_id, role=request.POST.get("role"))
    messages.info(request, f"{m.user.username} is now {m.get_role_display()}")
    return redirect("teams:detail", slug=slug)


@login_required
@require_POST
@answers_refusals
def member_remove(request, slug: str, membership_id: int):
    team = team_for(request.user, slug, Role.ADMIN)
    do_remove_member(team=team, actor=request.user, membership_id=membership_id)
    messages.info(request, "member removed")
    return redirect("teams:detail", slug=slug)


@login_required
@require_POST
@answers_refusals
def budget_criterion(request, slug: str):
    team = team_for(request.user, slug, Role.ADMIN)
    team = do_set_budget_criterion(team=team, actor=request.user, criterion=request.POST.get("budget_criterion"))
    messages.info(request, f"admission checks are now judged under the {team.budget_criterion} criterion")
    return redirect("teams:detail", slug=slug)
