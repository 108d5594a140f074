"""How a page answers a refusal: the styled error page with the refusal's status and
message, and the navigation, so a person sees what went wrong and where to go."""
from __future__ import annotations

import functools

from django.shortcuts import render

from opdweb.refusals import Refused


def refused_page(request, exc: Refused):
    return render(request, "refused.html", {"status": exc.status, "message": str(exc), "details": exc.details},
                  status=exc.status)


def answers_refusals(view):
    """Turn a :class:`Refused` raised by ``view`` into :func:`refused_page`."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except Refused as exc:
            return refused_page(request, exc)

    return wrapper
