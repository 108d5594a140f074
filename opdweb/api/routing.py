"""The API's dispatch: each declared endpoint at its route, session authentication,
pydantic validation of bodies and query strings, the view's result shaped by the declared
response, and the OpenAPI document at ``openapi.json``."""
from __future__ import annotations

from typing import get_origin

from django.http import Http404, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.urls import path
from pydantic import TypeAdapter, ValidationError

from opdweb.api.compression import gzipped
from opdweb.api.declarations import Endpoint, Routes
from opdweb.api.errors import problem
from opdweb.api.json_input import load_json
from opdweb.api.openapi import openapi_document
from opdweb.refusals import Refused


class Api:
    def __init__(self, title: str, version: str, routes: list[Routes]):
        self.title = title
        self.version = version
        self.endpoints = [e for r in routes for e in r.endpoints]

    def handle(self, endpoint: Endpoint, request, kwargs) -> HttpResponse:
        if not request.user.is_authenticated:
            return problem(401, "log in first")
        try:
            bad_query = _query_problem(endpoint, request.GET)
            if bad_query is not None:
                return bad_query
            if endpoint.body is not None:
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
            return problem(exc.status, str(exc), exc.details)
        except ValidationError as exc:
            failed = next((m for m in (endpoint.body, endpoint.query) if m is not None and m.__name__ == exc.title),
                          None)
            refused = Refused.invalid(exc, "", root="(body)", model=failed)
            return problem(400, str(refused), refused.details)
        try:
            result = endpoint.view(request, **kwargs)
        except Refused as exc:
            return problem(exc.status, str(exc), exc.details)
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
            return gzipped(request, self.handle(endpoint, request, kwargs))

        return dispatch

    def openapi(self) -> dict:
        return openapi_document(self.title, self.version, self.endpoints)


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
