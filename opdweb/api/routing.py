"""The API's dispatch: each declared endpoint at its route, authentication (the session, or
a bearer token through the ``bearer`` hook the project passes in), pydantic validation of
bodies and query strings, the view's result shaped by the declared response, and the
OpenAPI document at ``openapi.json``.

CSRF: a session request that writes is checked here, as Django's middleware would (the
dispatcher is exempt from the middleware so that a bearer request, which a browser never
forges, needs no CSRF token)."""
from __future__ import annotations

from typing import Callable, get_origin

from django.http import Http404, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.middleware.csrf import CsrfViewMiddleware
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from pydantic import TypeAdapter, ValidationError

from opdweb.api.compression import gzipped
from opdweb.api.declarations import Endpoint, Routes
from opdweb.api.errors import problem, refusal
from opdweb.api.json_input import load_json
from opdweb.api.openapi import openapi_document
from opdweb.refusals import Refused

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

#: ``bearer(request, writing) -> bool``: authenticates a request that carries
#: ``Authorization: Bearer`` (setting ``request.user``) and says whether it did; raises
#: :class:`Refused` for a token it does not accept or a write the token may not make.
BearerAuth = Callable[..., bool]


class Api:
    def __init__(self, title: str, version: str, routes: list[Routes], bearer: BearerAuth | None = None):
        self.title = title
        self.version = version
        self.endpoints = [e for r in routes for e in r.endpoints]
        self.bearer = bearer

    def handle(self, endpoint: Endpoint, request, kwargs) -> HttpResponse:
        if not request.user.is_authenticated:
            if self.bearer is None:
                return problem(401, "log in first")
            return problem(401, "log in first, or send an API token as 'Authorization: Bearer <token>'",
                           headers={"WWW-Authenticate": "Bearer"})
        try:
            bad_query = _query_problem(endpoint, request.GET)
            if bad_query is not None:
                return bad_query
            if endpoint.body is not None and endpoint.max_body_bytes is not None:
                kwargs["body"] = endpoint.body.model_validate_json(_large_body(request, endpoint.max_body_bytes))
            elif endpoint.body is not None:
                data = load_json(request.body or b"null", "request body")
                kwargs["body"] = endpoint.body.model_validate(data)
            if endpoint.query is not None:
                fields = endpoint.query.model_fields
                raw = {
                    name: request.GET.getlist(name) if _is_list(field.annotation) else request.GET[name]
                    for name, field in fields.items()
                    if name in request.GET
                }
                kwargs["query"] = endpoint.query.model_validate(raw)
        except Refused as exc:
            return refusal(exc)
        except ValidationError as exc:
            failed = next((m for m in (endpoint.body, endpoint.query) if m is not None and m.__name__ == exc.title),
                          None)
            refused = Refused.invalid(exc, "", root="(body)", model=failed)
            return problem(400, str(refused), refused.details)
        try:
            result = endpoint.view(request, **kwargs)
        except Refused as exc:
            return refusal(exc)
        except Http404 as exc:
            return problem(404, str(exc) or "not found")
        if isinstance(result, HttpResponseBase):
            return result
        payload = TypeAdapter(endpoint.response).dump_python(
            TypeAdapter(endpoint.response).validate_python(result, from_attributes=True), mode="json"
        )
        return JsonResponse(payload, status=endpoint.status, safe=False)

    def urls(self) -> list:
        by_route: dict[str, dict[str, Endpoint]] = {}
        for endpoint in self.endpoints:
            by_route.setdefault(endpoint.route, {})[endpoint.method] = endpoint
        patterns = [path("openapi.json", self._openapi_view, name="api-openapi")]
        for route, methods in by_route.items():
            patterns.append(path(route, self._dispatcher(methods)))
        return patterns

    def _openapi_view(self, request):
        """Public: the document describes the API, it reveals no data."""
        if request.method not in ("GET", "HEAD"):
            response = problem(405, f"{request.method} not allowed; use GET")
            response["Allow"] = "GET, HEAD"
            return response
        return JsonResponse(self.openapi())

    def _dispatcher(self, methods: dict[str, Endpoint]):
        def dispatch(request, **kwargs):
            endpoint = methods.get(request.method)
            if endpoint is None:
                response = problem(405, f"{request.method} not allowed; use {', '.join(sorted(methods))}")
                response["Allow"] = ", ".join(sorted(methods))
                return response
            writing = request.method not in SAFE_METHODS
            try:
                by_token = self.bearer is not None and self.bearer(request, writing=writing)
            except Refused as exc:
                return refusal(exc)
            if writing and not by_token:
                rejected = _csrf_rejection(request)
                if rejected is not None:
                    return rejected
            return gzipped(request, self.handle(endpoint, request, kwargs))

        limits = [e.max_body_bytes for e in methods.values() if e.max_body_bytes is not None]
        if limits:
            dispatch.max_body_bytes = max(limits)  # type: ignore[attr-defined]  # read by RequestSizeLimit
        return csrf_exempt(dispatch)

    def openapi(self) -> dict:
        return openapi_document(self.title, self.version, self.endpoints)


def _csrf_rejection(request) -> HttpResponse | None:
    """Django's own CSRF check of a session request (its failure view answers a ``Problem``)."""
    return CsrfViewMiddleware(lambda r: HttpResponse()).process_view(request, None, (), {})


def _large_body(request, limit: int) -> bytes:
    """The body of an endpoint that takes more than the site's limit, up to its own
    (:class:`opdweb.middleware.RequestSizeLimit` has refused a longer declared length)."""
    raw = request.read(limit + 1)
    if len(raw) > limit:
        raise Refused(f"request body exceeds the limit of {limit} bytes", status=413)
    return raw or b"null"


def _query_problem(endpoint: Endpoint, query) -> JsonResponse | None:
    """A 400 for a query parameter the endpoint does not know (a NUL in any value is
    refused before, by :class:`opdweb.middleware.RefuseNulCharacters`)."""
    known = list(endpoint.query.model_fields) if endpoint.query is not None else []
    unknown = sorted(set(query) - set(known))
    if unknown:
        takes = ", ".join(known) or "none"
        return problem(400, f"unknown query parameter {unknown[0]!r}; this endpoint takes {takes}",
                       [{"field": name, "message": "unknown query parameter"} for name in unknown])
    return None


def _is_list(annotation) -> bool:
    return get_origin(annotation) is list
