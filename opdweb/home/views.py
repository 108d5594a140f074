from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone

from opdweb.home.models import HomeVisit
from opdweb.home.overview import needs, next_steps, since_last_visit

#: Page loads closer together than this are one visit.
VISIT_GAP = timedelta(minutes=30)


@login_required
def home(request):
    now = timezone.now()
    visit, made = HomeVisit.objects.get_or_create(user=request.user, defaults={"seen_at": now})
    if not made and now - visit.seen_at > VISIT_GAP:
        visit.previous = visit.seen_at
    visit.seen_at = now
    visit.save()
    return render(request, "home.html", {"needs": needs(request.user), "since": since_last_visit(
        request.user, visit.previous), "steps": next_steps(request.user)})
