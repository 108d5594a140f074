"""Refuse, before any view, what no view can take: bodies over the limit (a clear 413,
where Django alone answers 400) and NUL characters in a query string or form
(PostgreSQL cannot store or compare them; a view that passes one on answers 500)."""
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponseBadRequest, JsonResponse
from django.urls import Resolver404, resolve

ARTIFACTS = "/mlflow/api/2.0/mlflow-artifacts/"
WANDB_UPLOADS = "/wandb/upload/"


class RequestSizeLimit:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if request.path.startswith((ARTIFACTS, WANDB_UPLOADS)):
            own = settings.OPDWEB_ARTIFACT_MAX_BYTES  # a file, streamed to the store by the view
        elif request.path.startswith("/mlflow/"):
            own = settings.MLFLOW_MAX_REQUEST_BYTES
        elif request.path.startswith("/wandb/"):
            own = settings.WANDB_MAX_REQUEST_BYTES
        else:
            own = _declared_limit(request)
        if own is not None:
            # MLflow's own limit on a request (a log-batch of 1,000 metrics with long keys
            # passes Django's), or one an API endpoint declares (a run's points); these
            # views read the body themselves, within it.
            limit = own
            if int(request.META.get("CONTENT_LENGTH") or 0) > limit:
                return too_large(request, f"request body of {request.META['CONTENT_LENGTH']} bytes exceeds the "
                                          f"limit of {limit} bytes")
            return self.get_response(request)
        if limit is None:
            return self.get_response(request)
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            return too_large(request, f"request body of {length} bytes exceeds the limit of {limit} bytes")
        if "CONTENT_LENGTH" not in request.META and request.method not in ("GET", "HEAD", "OPTIONS"):
            # A chunked body says nothing of its size up front: reading it (already
            # buffered by the ASGI handler) checks the real size against the limit.
            try:
                _ = request.body
            except RequestDataTooBig:
                return too_large(request, f"request body exceeds the limit of {limit} bytes")
        return self.get_response(request)


def _declared_limit(request) -> int | None:
    """The larger body limit the API view at this path declares (``max_body_bytes``), if any."""
    if not request.path.startswith("/api/"):
        return None
    try:
        view = resolve(request.path_info).func
    except Resolver404:
        return None
    return getattr(view, "max_body_bytes", None)


def too_large(request, detail: str) -> JsonResponse:
    if request.path.startswith("/mlflow/"):  # MLflow's clients read MLflow's error shape
        return JsonResponse({"error_code": "INVALID_PARAMETER_VALUE", "message": detail}, status=413)
    if request.path.startswith("/wandb/"):  # W&B's clients print errors[0].message
        return JsonResponse({"errors": [{"message": detail}]}, status=413)
    return JsonResponse({"detail": detail, "errors": []}, status=413)


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class RefuseNulCharacters:
    """A 400 naming the parameter: JSON under /api/, plain text elsewhere (the admin's
    filters and the pages' forms included).  JSON bodies are checked where they are
    parsed (:func:`opdweb.api.json_input.load_json`)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        where = [("query parameter", request.GET)]
        if request.method == "POST" and request.content_type in FORM_TYPES:
            # Read the raw body first: a view may still want it (the API reads every body
            # as JSON), and a multipart parse would otherwise consume the stream.
            _ = request.body
            where.append(("form field", request.POST))
        for what, data in where:
            for name, values in data.lists():
                if "\x00" in name or any("\x00" in value for value in values):
                    detail = f"{what} {name!r} contains a NUL character"
                    if request.path.startswith("/mlflow/"):  # MLflow's error shape for its clients
                        return JsonResponse({"error_code": "INVALID_PARAMETER_VALUE", "message": detail}, status=400)
                    if request.path.startswith("/wandb/"):
                        return JsonResponse({"errors": [{"message": detail}]}, status=400)
                    if request.path.startswith("/api/"):
                        errors = [{"field": name, "message": "contains a NUL character"}]
                        return JsonResponse({"detail": detail, "errors": errors}, status=400)
                    return HttpResponseBadRequest(detail, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
