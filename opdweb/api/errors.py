"""Errors as JSON ``Problem`` answers: ``{"detail", "errors"}`` with a 4xx or 5xx."""
from __future__ import annotations

from django.http import JsonResponse


def problem(status: int, detail: str, errors: list | None = None) -> JsonResponse:
    return JsonResponse({"detail": detail, "errors": errors or []}, status=status)


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


def server_error(request):
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
