"""Refuse oversized request bodies up front with a clear 413 (Django alone answers 400)."""
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse


class RequestSizeLimit:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is None:
            return self.get_response(request)
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            return too_large(f"request body of {length} bytes exceeds the limit of {limit} bytes")
        if "CONTENT_LENGTH" not in request.META and request.method not in ("GET", "HEAD", "OPTIONS"):
            # A chunked body says nothing of its size up front: reading it (already
            # buffered by the ASGI handler) checks the real size against the limit.
            try:
                request.body
            except RequestDataTooBig:
                return too_large(f"request body exceeds the limit of {limit} bytes")
        return self.get_response(request)


def too_large(detail: str) -> JsonResponse:
    return JsonResponse({"detail": detail, "errors": []}, status=413)
