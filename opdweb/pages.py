"""How a page answers a refusal: the styled error page with the refusal's status and
message, and the navigation, so a person sees what went wrong and where to go."""
from __future__ import annotations

import functools

from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme

from opdweb.refusals import Refused


def back_link(request) -> str | None:
    """Where "Go back" leads: the page the person came from, when it is one of ours."""
    referer = request.META.get("HTTP_REFERER", "")
    if referer and url_has_allowed_host_and_scheme(referer, allowed_hosts={request.get_host()},
                                                   require_https=request.is_secure()):
        return referer
    return None


def refused_page(request, exc: Refused):
    return render(request, "refused.html", {"status": exc.status, "message": str(exc), "details": exc.details,
                                            "back": back_link(request)}, status=exc.status)


def answers_refusals(view):
    """Turn a :class:`Refused` raised by ``view`` into :func:`refused_page`."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except Refused as exc:
            return refused_page(request, exc)

    return wrapper
