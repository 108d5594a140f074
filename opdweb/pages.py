"""How a page answers a refusal.  A form posted from one of our pages is answered by that
page again, drawn with the refusal's message above its content and the input the person
typed kept in its fields, under the refusal's 4xx status; anything else (a GET, a POST
with no page of ours behind it) gets the styled error page with the message and the
navigation, so a person sees what went wrong and where to go."""
from __future__ import annotations

import copy
import functools
from urllib.parse import urlsplit

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, QueryDict
from django.shortcuts import render
from django.urls import Resolver404, resolve
from django.utils.http import url_has_allowed_host_and_scheme

from opdweb.refusals import Refused


def back_link(request) -> str | None:
    """Where "Go back" leads: the page the person came from, when it is one of ours."""
    referer = request.META.get("HTTP_REFERER", "")
    if referer and url_has_allowed_host_and_scheme(referer, allowed_hosts={request.get_host()},
                                                   require_https=request.is_secure()):
        return referer
    return None


def further_details(exc: Refused) -> list[dict]:
    """The refusal's field problems, less any its message already says (never said twice)."""
    return [d for d in exc.details if str(d.get("message", "")) not in str(exc)]


def refused_page(request, exc: Refused):
    return render(request, "refused.html", {"status": exc.status, "message": str(exc), "details": further_details(exc),
                                            "back": back_link(request)}, status=exc.status)


def refused_in_place(request, exc: Refused) -> HttpResponse | None:
    """The page the refused form was posted from, drawn again (a GET of it, as this user)
    with ``request.refusal``: the message, the form's action and the values posted; None
    when there is no such page of ours to draw."""
    back = back_link(request) if request.method == "POST" else None
    if back is None:
        return None
    url = urlsplit(back)
    try:
        match = resolve(url.path)
    except Resolver404:
        return None
    page = copy.copy(request)
    page.method, page.path, page.path_info = "GET", url.path, url.path
    page.GET, page.POST = QueryDict(url.query), QueryDict()
    page.refusal = {"form": request.path, "message": str(exc),
                    "details": further_details(exc),
                    "values": {k: v for k, v in request.POST.items() if k != "csrfmiddlewaretoken"}}
    try:
        response = match.func(page, *match.args, **match.kwargs)
    except (Http404, PermissionDenied, Refused):  # that page cannot be drawn for this person: the refusal page
        return None
    if response.status_code != 200 or not response.get("Content-Type", "").startswith("text/html"):
        return None
    response.status_code = exc.status
    return response


def answers_refusals(view):
    """Turn a :class:`Refused` raised by ``view`` into the page the form came from, drawn with
    the refusal (:func:`refused_in_place`), else into :func:`refused_page`."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except Refused as exc:
            return refused_in_place(request, exc) or refused_page(request, exc)

    return wrapper


def refusal(request) -> dict:
    """Context processor: the refusal a page is drawn again with (``refusal.message``,
    ``refusal.form``: the action refused, ``refusal.values``: what was typed), or None."""
    return {"refusal": getattr(request, "refusal", None)}
