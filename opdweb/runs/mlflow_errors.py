"""MLflow's error answer: ``{"error_code": "...", "message": "..."}`` with the HTTP status
MLflow's own server gives that code, so the client raises the exception it expects
(``RESOURCE_DOES_NOT_EXIST`` from ``experiments/get-by-name`` is how ``set_experiment``
learns it must create the experiment)."""
from __future__ import annotations

from django.http import JsonResponse

from opdweb.refusals import Refused

INVALID_PARAMETER_VALUE = "INVALID_PARAMETER_VALUE"
INVALID_STATE = "INVALID_STATE"
RESOURCE_DOES_NOT_EXIST = "RESOURCE_DOES_NOT_EXIST"
RESOURCE_ALREADY_EXISTS = "RESOURCE_ALREADY_EXISTS"
ENDPOINT_NOT_FOUND = "ENDPOINT_NOT_FOUND"
BAD_REQUEST = "BAD_REQUEST"

# A product refusal (a token's 401 / 403 / 429, a 413) as the code MLflow gives that status.
CODE_OF_STATUS = {400: INVALID_PARAMETER_VALUE, 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                  404: RESOURCE_DOES_NOT_EXIST, 405: BAD_REQUEST, 409: RESOURCE_ALREADY_EXISTS,
                  413: INVALID_PARAMETER_VALUE, 429: "REQUEST_LIMIT_EXCEEDED", 503: "TEMPORARILY_UNAVAILABLE"}


class MlflowRefused(Refused):
    """A refusal with MLflow's error code."""

    def __init__(self, message: str, code: str = INVALID_PARAMETER_VALUE, status: int = 400):
        super().__init__(message, status=status)
        self.code = code


def not_found(message: str) -> MlflowRefused:
    return MlflowRefused(message, RESOURCE_DOES_NOT_EXIST, 404)


def invalid(message: str) -> MlflowRefused:
    return MlflowRefused(message, INVALID_PARAMETER_VALUE, 400)


def mlflow_error(exc: Refused) -> JsonResponse:
    code = getattr(exc, "code", None) or CODE_OF_STATUS.get(exc.status, BAD_REQUEST)
    return JsonResponse({"error_code": code, "message": str(exc)}, status=exc.status, headers=exc.headers)
