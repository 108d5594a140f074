"""Registry pages: the models of your teams with the register form (members and up), one
model with the jobs and budgets that use it, and its deletion (admins, when unused)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from opdweb.pages import answers_refusals
from opdweb.refusals import Refused
from opdweb.registry.access import visible_model
from opdweb.registry.descriptions import latest, queue_describe
from opdweb.registry.models import SUGGESTED_KINDS, RegisteredModel
from opdweb.registry.references import budgets_of, is_referenced, jobs_using
from opdweb.registry.registration import register_model
from opdweb.teams.access import role_in, teams_of
from opdweb.teams.models import Role


@login_required
def model_list(request):
    registrable = list(teams_of(request.user, Role.MEMBER))
    form = {"team": registrable[0].slug if registrable else "", "name": "", "path": "", "kind": ""}
    error, status = None, 200
    if request.method == "POST":
        form = {k: request.POST.get(k, "") for k in form}
        team = next((t for t in registrable if t.slug == form["team"]), None)
        try:
            if team is None:
                raise Refused("choose a team in which you are a member or more", status=403)
            model = register_model(team=team, user=request.user, name=form["name"], path=form["path"],
                                   kind=form["kind"])
        except Refused as exc:
            error, status = str(exc), exc.status
        else:
            messages.info(request, f"registered {model.name}")
            return redirect("registry:detail", model_id=model.pk)
    models = RegisteredModel.objects.filter(team__in=teams_of(request.user)).select_related("team", "created_by")
    return render(request, "registry/list.html", {"models": models[:500], "teams": registrable, "form": form,
                                                  "error": error, "kinds": SUGGESTED_KINDS}, status=status)


@login_required
def model_detail(request, model_id: int):
    model = visible_model(request.user, model_id)
    return render(request, "registry/detail.html", {
        "model": model, "jobs": jobs_using(model).order_by("-created_at")[:200], "described": latest(model.path),
        "can_read": role_in(request.user, model.team_id) >= Role.MEMBER,
        "budgets": budgets_of(model)[:200], "can_delete": role_in(request.user, model.team_id) >= Role.ADMIN,
    })


@login_required
@require_POST
@answers_refusals
def model_read_again(request, model_id: int):
    """Queue a worker's describe job of the model: its digest and facts as the files are now
    (an approval whose checkpoint changed lapses once this has read the new content)."""
    model = visible_model(request.user, model_id)
    if role_in(request.user, model.team_id) < Role.MEMBER:
        raise Refused(f"only a member of team {model.team.slug} can have a model read again", status=403)
    model.describe_job = queue_describe(team=model.team, user=request.user, uri=model.path)
    model.save(update_fields=["describe_job"])
    messages.info(request, f"reading {model.name} on a worker (job #{model.describe_job.pk})")
    return redirect("registry:detail", model_id=model.pk)


@login_required
@require_POST
@answers_refusals
def model_delete(request, model_id: int):
    model = visible_model(request.user, model_id)
    if role_in(request.user, model.team_id) < Role.ADMIN:
        raise Refused(f"only an admin of team {model.team.slug} can delete a registered model", status=403)
    if is_referenced(model):
        raise Refused(f"{model.name} is used by jobs or budgets of team {model.team.slug}; it stays registered",
                      status=409)
    model.delete()
    messages.info(request, f"deleted {model.name}")
    return redirect("registry:list")
