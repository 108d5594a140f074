"""The REST API (``/api/``), with its OpenAPI schema at ``/api/openapi.json`` and docs
at ``/api/docs``.  Session authentication; every object is team-scoped."""
from django.http import Http404
from ninja import NinjaAPI
from ninja.security import django_auth

from opdweb.jobs.actions import JobRefused

api = NinjaAPI(title="opdweb", version="1", auth=django_auth, urls_namespace="api")


@api.exception_handler(JobRefused)
def job_refused(request, exc: JobRefused):
    return api.create_response(request, {"detail": str(exc), "errors": exc.details}, status=exc.status)


@api.exception_handler(Http404)
def not_found(request, exc):
    return api.create_response(request, {"detail": str(exc) or "not found"}, status=404)


from opdweb.jobs.api import router as jobs_router  # noqa: E402

api.add_router("/", jobs_router)
