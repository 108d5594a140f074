"""Refuse oversized request bodies up front with a clear 413 (Django alone answers 400)."""
from django.conf import settings
from django.http import JsonResponse


class RequestSizeLimit:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and length > limit:
            return JsonResponse({"detail": f"request body of {length} bytes exceeds the limit of {limit} bytes"}, status=413)
        return self.get_response(request)
