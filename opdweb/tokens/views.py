"""The tokens page: a person's tokens, a form to make one (its secret shown once, on the
answer to the form, never in a URL or stored), and revocation.  A team's admins also see
and may revoke every token of their team."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from opdweb.pages import answers_refusals
from opdweb.refusals import Refused
from opdweb.teams.access import teams_of
from opdweb.teams.models import Role
from opdweb.tokens.actions import do_create_token, do_revoke_token
from opdweb.tokens.models import ApiToken


def _visible_tokens(user):
    """The user's own tokens and, for a team admin, the team's."""
    admin_of = teams_of(user, Role.ADMIN)
    return ApiToken.objects.filter(Q(user=user) | Q(team__in=admin_of)).select_related("team", "user")


@login_required
@answers_refusals
def token_list(request):
    teams = list(teams_of(request.user))
    created = secret = None
    status = 200
    form = {"name": "", "team": teams[0].slug if teams else "", "scope": "read"}
    if request.method == "POST":
        form = {k: request.POST.get(k, "") for k in ("name", "team", "scope")}
        team = next((t for t in teams if t.slug == form["team"]), None)
        try:
            if team is None:
                raise Refused("choose one of your teams", details=[{"field": "team", "message": "not your team"}])
            if form["scope"] not in ("read", "write"):
                raise Refused("scope is read or write", details=[{"field": "scope", "message": "read or write"}])
            created, secret = do_create_token(user=request.user, team=team, name=form["name"],
                                              can_write=form["scope"] == "write")
        except Refused as exc:
            messages.error(request, str(exc))
            status = exc.status
    context = {"tokens": _visible_tokens(request.user), "teams": teams, "form": form, "created": created,
               "secret": secret}
    response = render(request, "tokens/list.html", context, status=status)
    if secret is not None:
        response["Cache-Control"] = "no-store"  # the secret must not stay in any cache
    return response


@login_required
@require_POST
@answers_refusals
def token_revoke(request, token_id: int):
    token = _visible_tokens(request.user).filter(pk=token_id).first()
    if token is None:
        raise Refused(f"token #{token_id} not found", status=404)
    do_revoke_token(token=token, actor=request.user)
    messages.info(request, f"token {token.name!r} revoked")
    return redirect("tokens:list")
