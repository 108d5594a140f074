"""Errors as JSON ``Problem`` answers: ``{"detail", "errors"}`` with a 4xx or 5xx."""
from __future__ import annotations

import sys

from django.http import HttpResponse, JsonResponse

from opdweb.refusals import RETRY_AFTER_OUTAGE


def problem(status: int, detail: str, errors: list | None = None,
            headers: dict[str, str] | None = None) -> JsonResponse:
    return JsonResponse({"detail": detail, "errors": errors or []}, status=status, headers=headers)


def refusal(exc) -> JsonResponse:
    """A :class:`~opdweb.refusals.Refused` as its ``Problem``, with its headers."""
    return problem(exc.status, str(exc), exc.details, exc.headers)


# Django's own answers (no route, an uncaught exception, a suspicious request, a CSRF
# failure) are HTML pages; under /api/ a client gets the same JSON ``Problem`` as from the
# endpoints, and never a traceback.

def _under_api(request) -> bool:
    return request.path.startswith("/api/")


def not_found(request, exception=None):
    if _under_api(request):
        return problem(404, f"{request.path} not found")
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


DATABASE_DOWN = "the database is unreachable; nothing was changed, try again in a moment"


def _database_unreachable() -> bool:
    """Whether the exception being handled is the database not answering (Django calls the
    500 handler inside its ``except``), as opposed to a bug."""
    from django.db import InterfaceError, OperationalError

    return isinstance(sys.exc_info()[1], (OperationalError, InterfaceError))


def server_error(request):
    if _database_unreachable():  # an outage, not a bug: 503, which a client may retry
        if _under_api(request):
            return problem(503, DATABASE_DOWN, headers=RETRY_AFTER_OUTAGE)
        return HttpResponse(DATABASE_DOWN, status=503, content_type="text/plain; charset=utf-8",
                            headers=RETRY_AFTER_OUTAGE)
    if _under_api(request):
        return problem(500, "internal error; it has been logged")
    from django.views.defaults import server_error as page_server_error

    return page_server_error(request)


def bad_request(request, exception=None):
    if _under_api(request):
        return problem(400, "bad request")
    from django.views.defaults import bad_request as page_bad_request

    return page_bad_request(request, exception)


def permission_denied(request, exception=None):
    if _under_api(request):
        return problem(403, str(exception) or "forbidden")
    from django.views.defaults import permission_denied as page_permission_denied

    return page_permission_denied(request, exception)


def csrf_failure(request, reason=""):
    if _under_api(request):
        return problem(403, f"CSRF check failed: {reason.rstrip('.')}; "
                            "send the csrftoken cookie's value as X-CSRFToken")
    from django.views.csrf import csrf_failure as page_csrf_failure

    return page_csrf_failure(request, reason)
