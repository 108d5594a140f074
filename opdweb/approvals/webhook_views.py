"""A team's webhook: its settings and its delivery log."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.shortcuts import redirect, render

from opdweb.approvals.models import TeamWebhook, WebhookDelivery
from opdweb.approvals.webhook_destinations import ForbiddenDestination, check_destination
from opdweb.pages import answers_refusals
from opdweb.refusals import Refused
from opdweb.teams import audit
from opdweb.teams.access import team_for
from opdweb.teams.models import Role


def check_webhook(url: str, secret: str) -> tuple[str, str]:
    url, secret = (url or "").strip(), (secret or "").strip()
    problems = []
    try:
        URLValidator(schemes=["http", "https"])(url)
    except ValidationError:
        problems.append({"field": "url", "message": "must be an http:// or https:// URL"})
    else:
        try:
            check_destination(url)
        except ForbiddenDestination as exc:
            problems.append({"field": "url", "message": str(exc)})
    if len(secret) < 16:
        problems.append({"field": "secret", "message": "must be at least 16 characters"})
    if problems:
        raise Refused("; ".join(f"{p['field']}: {p['message']}" for p in problems), details=problems)
    return url, secret


@login_required
@answers_refusals
def webhook_settings(request, slug: str):
    team = team_for(request.user, slug, Role.ADMIN)
    hook = TeamWebhook.objects.filter(team=team).first()
    if request.method == "POST":
        with transaction.atomic():
            if request.POST.get("remove"):
                TeamWebhook.objects.filter(team=team).delete()
                audit.record(team, request.user, audit.WEBHOOK_CHANGED, "removed the webhook", subject="webhook")
            else:
                url, secret = check_webhook(request.POST.get("url", ""), request.POST.get("secret", ""))
                TeamWebhook.objects.update_or_create(team=team, defaults={"url": url, "secret": secret})
                audit.record(team, request.user, audit.WEBHOOK_CHANGED, f"set the webhook to {url}",
                             subject="webhook", url=url)
        messages.info(request, "webhook saved")
        return redirect("approvals:webhook", slug=slug)
    deliveries = WebhookDelivery.objects.filter(team=team)[:200]
    return render(request, "approvals/webhook.html", {"team": team, "hook": hook, "deliveries": deliveries})
