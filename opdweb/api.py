"""A small JSON API layer on plain Django views: session authentication, pydantic
validation of bodies and query strings, errors as ``{"detail", "errors"}`` with a 4xx,
and an OpenAPI 3.1 document built from the same declarations (``/api/openapi.json``).

Each app declares its endpoints once on its own :class:`Routes` (``routes.get(...)``);
``opdweb/urls.py`` gathers the apps' routes into one :class:`Api`.  The declaration drives
the validation, the response shape and the schema, so they cannot drift apart.  Nothing
here knows any app.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, get_origin

from django.http import Http404, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.urls import path
from django.views.decorators.http import require_GET
from pydantic import BaseModel, TypeAdapter, ValidationError

from opdweb.refusals import Refused


def problem(status: int, detail: str, errors: list | None = None) -> JsonResponse:
    return JsonResponse({"detail": detail, "errors": errors or []}, status=status)


@dataclass
class Endpoint:
    method: str
    route: str  # Django route, e.g. "jobs/<int:job_id>"
    view: Callable
    summary: str
    body: type[BaseModel] | None
    query: type[BaseModel] | None
    response: Any
    status: int
    errors: tuple[int, ...]

    @property
    def openapi_path(self) -> str:
        return "/api/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", self.route)


class Routes:
    """One app's endpoints, declared with :meth:`route`."""

    def __init__(self) -> None:
        self.endpoints: list[Endpoint] = []

    def route(self, method: str, route: str, *, summary: str, body=None, query=None, response=None,
              status: int = 200, errors: tuple[int, ...] = ()):
        def register(view):
            self.endpoints.append(Endpoint(method, route, view, summary, body, query, response, status, errors))
            return view

        return register


class Api:
    def __init__(self, title: str, version: str, routes: list[Routes]):
        self.title = title
        self.version = version
        self.endpoints = [e for r in routes for e in r.endpoints]

    def handle(self, endpoint: Endpoint, request, kwargs) -> HttpResponse:
        if not request.user.is_authenticated:
            return problem(401, "log in first")
        try:
            if endpoint.body is not None:
                try:
                    data = json.loads(request.body or b"null")
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    return problem(400, f"request body is not valid JSON: {exc}")
                kwargs["body"] = endpoint.body.model_validate(data)
            if endpoint.query is not None:
                fields = endpoint.query.model_fields
                raw = {
                    name: request.GET.getlist(name) if _is_list(field.annotation) else request.GET[name]
                    for name, field in fields.items()
                    if name in request.GET
                }
                kwargs["query"] = endpoint.query.model_validate(raw)
        except ValidationError as exc:
            refused = Refused.invalid(exc, "", root="(body)")
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
        patterns = [path("openapi.json", require_GET(lambda request: JsonResponse(self.openapi())), name="api-openapi")]
        for route, methods in by_route.items():
            patterns.append(path(route, self._dispatcher(methods)))
        return patterns

    def _dispatcher(self, methods: dict[str, Endpoint]):
        def dispatch(request, **kwargs):
            endpoint = methods.get(request.method)
            if endpoint is None:
                response = problem(405, f"{request.method} not allowed; use {', '.join(sorted(methods))}")
                response["Allow"] = ", ".join(sorted(methods))
                return response
            return self.handle(endpoint, request, kwargs)

        return dispatch

    def openapi(self) -> dict:
        paths: dict[str, dict] = {}
        components: dict[str, dict] = {}

        def schema_of(model) -> dict:
            schema = TypeAdapter(model).json_schema(ref_template="#/components/schemas/{model}")
            components.update(schema.pop("$defs", {}))
            return schema

        for e in self.endpoints:
            op: dict[str, Any] = {"summary": e.summary, "responses": {}}
            params = [
                {"name": name, "in": "path", "required": True, "schema": {"type": "integer"}}
                for name in re.findall(r"<int:(\w+)>", e.route)
            ]
            if e.query is not None:
                for name, field in e.query.model_fields.items():
                    params.append({"name": name, "in": "query", "required": field.is_required(),
                                   "description": field.description or "",
                                   "schema": schema_of(field.annotation)})
            if params:
                op["parameters"] = params
            if e.body is not None:
                op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema_of(e.body)}}}
            ok = {"description": "OK"}
            if e.response is not None:
                ok["content"] = {"application/json": {"schema": schema_of(e.response)}}
            op["responses"][str(e.status)] = ok
            for status in sorted({401, *e.errors}):
                op["responses"][str(status)] = {"description": "problem", "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Problem"}}}}
            paths.setdefault(e.openapi_path, {})[e.method.lower()] = op
        components["Problem"] = {
            "type": "object",
            "properties": {"detail": {"type": "string"}, "errors": {"type": "array", "items": {"type": "object"}}},
            "required": ["detail"],
        }
        return {
            "openapi": "3.1.0",
            "info": {"title": self.title, "version": self.version},
            "paths": paths,
            "components": {"schemas": components, "securitySchemes": {"session": {"type": "apiKey", "in": "cookie", "name": "sessionid"}}},
            "security": [{"session": []}],
        }


def _is_list(annotation) -> bool:
    return get_origin(annotation) is list

