"""A small JSON API layer on plain Django views: session authentication, pydantic
validation of bodies and query strings, errors as ``{"detail", "errors"}`` with a 4xx,
and an OpenAPI 3.1 document built from the same declarations (``/api/openapi.json``).

Each app declares its endpoints once on its own :class:`Routes` (``routes.get(...)``);
``opdweb/urls.py`` gathers the apps' routes into one :class:`Api`.  The declaration drives
the validation, the response shape and the schema, so they cannot drift apart.  Nothing
here knows any app.
"""
from __future__ import annotations

import gzip
import json
import math
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, get_origin

from django.http import Http404, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.urls import path
from django.utils.cache import patch_vary_headers
from pydantic import BaseModel, TypeAdapter, ValidationError

from opdweb.refusals import Refused

ACCEPTS_GZIP = re.compile(r"\bgzip\b")

# JSON deeper than this is refused: nothing we accept nests that far, and Python's
# recursion (the decoder, pydantic, the encoder) gives out around 1,000 levels.
MAX_JSON_DEPTH = 64


def problem(status: int, detail: str, errors: list | None = None) -> JsonResponse:
    return JsonResponse({"detail": detail, "errors": errors or []}, status=status)


class _NotAJsonNumber(ValueError):
    pass


def _refuse_constant(name: str):
    raise _NotAJsonNumber(f"{name} is not a JSON number")


def load_json(raw: bytes | str, what: str) -> Any:
    """Parse ``raw`` as JSON that PostgreSQL and the rest of the stack can hold, or raise
    :class:`Refused` (400) naming the first offending field: malformed text, nesting deeper
    than :data:`MAX_JSON_DEPTH`, integers over Python's 4,300-digit conversion limit,
    NaN / Infinity, and NUL characters (PostgreSQL cannot store them in text or jsonb)."""
    try:
        data = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        raise Refused(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except (json.JSONDecodeError, UnicodeDecodeError, _NotAJsonNumber) as exc:
        raise Refused(f"{what} is not valid JSON: {exc}") from None
    except ValueError:  # int() past Python's limit on digits
        raise Refused(f"{what} holds an integer longer than {sys.get_int_max_str_digits()} digits") from None
    check_storable(data, what)
    return data


def check_storable(data: Any, what: str, root: str = "") -> None:
    """Refuse (400) what PostgreSQL cannot store or Python cannot walk safely; iterative,
    so a deep document cannot exhaust the stack here."""

    def refuse(where: str, message: str, detail: str | None = None):
        field = where or "(body)"
        raise Refused(detail or f"{what}: {field} {message}", details=[{"field": field, "message": message}])

    stack: list[tuple[str, Any, int]] = [(root, data, 0)]
    while stack:
        where, value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            refuse(where, f"nested deeper than {MAX_JSON_DEPTH} levels",
                   f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(value, str) and "\x00" in value:
            refuse(where, "contains a NUL character")
        elif isinstance(value, float) and not math.isfinite(value):
            refuse(where, "is not a finite number")
        elif isinstance(value, dict):
            for key, item in value.items():
                if "\x00" in key:
                    refuse(where, "a field name contains a NUL character")
                stack.append((f"{where}.{key}" if where else key, item, depth + 1))
        elif isinstance(value, list):
            stack.extend((f"{where}.{i}" if where else str(i), item, depth + 1) for i, item in enumerate(value))


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
    produces: tuple[str, ...] = ()  # media types of a non-JSON (streamed) response
    # Returns the type that documents the body, when ``body`` alone says less.
    body_schema: Callable | None = None

    @property
    def openapi_path(self) -> str:
        return "/api/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", self.route)


class Routes:
    """One app's endpoints, declared with :meth:`route`."""

    def __init__(self) -> None:
        self.endpoints: list[Endpoint] = []

    def route(self, method: str, route: str, *, summary: str, body=None, query=None, response=None,
              status: int = 200, errors: tuple[int, ...] = (), produces: tuple[str, ...] = (), body_schema=None):
        def register(view):
            self.endpoints.append(Endpoint(method, route, view, summary, body, query, response, status, errors,
                                           produces, body_schema))
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
        """The document says what each endpoint enforces: the query models' limits, the
        path converters' digits, and every refusal (a JSON ``Problem``) it can answer."""
        paths: dict[str, dict] = {}
        components: dict[str, dict] = {}

        def schema_of(model) -> dict:
            schema = TypeAdapter(model).json_schema(ref_template="#/components/schemas/{model}")
            components.update(schema.pop("$defs", {}))
            return schema

        for e in self.endpoints:
            op: dict[str, Any] = {"summary": e.summary, "responses": {}}
            # Django's <int:...> converter takes digits only; anything else is a 404.
            params = [
                {"name": name, "in": "path", "required": True, "schema": {"type": "integer", "minimum": 0}}
                for name in re.findall(r"<int:(\w+)>", e.route)
            ]
            refusals = {401, *e.errors}
            if params:
                refusals.add(404)
            if e.query is not None:
                refusals.add(400)
                properties = schema_of(e.query)["properties"]
                for name, field in e.query.model_fields.items():
                    params.append({"name": name, "in": "query", "required": field.is_required(),
                                   "description": field.description or "",
                                   "schema": _without_nul(_query_parameter_schema(properties[name]))})
            if params:
                op["parameters"] = params
            if e.body is not None:
                refusals.update({400, 403, 413})  # 403: also a missing CSRF token
                documented = e.body_schema() if e.body_schema is not None else e.body
                op["requestBody"] = {"required": True, "content": {"application/json": {
                    "schema": _without_nul(schema_of(documented))}}}
            ok: dict[str, Any] = {"description": "OK"}
            if e.response is not None:
                ok["content"] = {"application/json": {"schema": schema_of(e.response)}}
            elif e.produces:
                ok["content"] = {media_type: {"schema": {"type": "string"}} for media_type in e.produces}
            op["responses"][str(e.status)] = ok
            for status in sorted(refusals):
                op["responses"][str(status)] = {"description": "problem", "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Problem"}}}}
            paths.setdefault(e.openapi_path, {})[e.method.lower()] = op
        for name in list(components):
            components[name] = _without_nul(components[name])
        components["Problem"] = {
            "type": "object",
            "properties": {
                "detail": {"type": "string"},
                "errors": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
                    "required": ["field", "message"],
                }},
            },
            "required": ["detail", "errors"],
        }
        return {
            "openapi": "3.1.0",
            "info": {"title": self.title, "version": self.version},
            "paths": paths,
            "components": {"schemas": components, "securitySchemes": {"session": {"type": "apiKey", "in": "cookie", "name": "sessionid"}}},
            "security": [{"session": []}],
        }


# Every string the API takes is refused with a NUL in it (PostgreSQL cannot store one).
NO_NUL = "^[^\\x00]*$"


def gzipped(request, response: HttpResponseBase) -> HttpResponseBase:
    """The answer gzip-compressed at level 1 for a client that accepts gzip (whole answers
    of 1 KB or more; streamed exports go as they are).  A chart read's 80 KB of JSON becomes
    37 KB in about 1 ms, where Django's GZipMiddleware (level 6) takes 5.5 ms for 35 KB.  API
    answers carry no CSRF token or other secret beside reflected input, so compressing them
    does not open the BREACH attack the pages would."""
    if response.streaming or len(response.content) < 1024 or response.has_header("Content-Encoding"):
        return response
    patch_vary_headers(response, ("Accept-Encoding",))
    if not ACCEPTS_GZIP.search(request.headers.get("Accept-Encoding", "")):
        return response
    response.content = gzip.compress(response.content, compresslevel=1, mtime=0)
    response["Content-Encoding"] = "gzip"
    response["Content-Length"] = str(len(response.content))
    return response


def _without_nul(schema):
    """``schema`` with ``pattern: NO_NUL`` on each string without a pattern, enum or const
    of its own, so the document says what :func:`check_storable` enforces."""
    if isinstance(schema, list):
        return [_without_nul(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    values = ("default", "examples", "example", "const", "enum")  # data, not schemas
    out = {k: (v if k in values else _without_nul(v)) for k, v in schema.items()}
    types = out.get("type")
    is_string = types == "string" or (isinstance(types, list) and "string" in types)
    if is_string and not ({"pattern", "enum", "const", "format"} & out.keys()):
        out["pattern"] = NO_NUL
    return out


def _query_parameter_schema(schema: dict) -> dict:
    """A query model field's schema as a parameter's: an absent parameter is how a query
    string says ``None``, so ``anyOf [X, null]`` becomes ``X``; the title is noise here."""
    schema = {k: v for k, v in schema.items() if k != "title"}
    alternatives = schema.get("anyOf")
    if alternatives:
        kept = [a for a in alternatives if a.get("type") != "null"]
        if len(kept) == 1:
            schema.pop("anyOf")
            if schema.get("default", ...) is None:
                schema.pop("default")
            schema.update(kept[0])
    return schema


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
