"""The OpenAPI 3.1 document, built from the endpoints' declarations; it says what each one
enforces (``/api/openapi.json``)."""
from __future__ import annotations

import re
from typing import Any

from pydantic import TypeAdapter

from opdweb.api.declarations import Endpoint

# Every string the API takes is refused with a NUL in it (PostgreSQL cannot store one).
NO_NUL = "^[^\\x00]*$"


PATH_CONVERTER_SCHEMAS = {
    "int": {"type": "integer", "minimum": 0},
    "str": {"type": "string", "minLength": 1, "pattern": "^[^/\\x00]+$"},
}


SECURITY_SCHEMES = {
    "session": {"type": "apiKey", "in": "cookie", "name": "sessionid",
                "description": "the browser's login session; a write also needs the csrftoken cookie's value "
                               "as X-CSRFToken"},
    "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "opd_ token",
               "description": "a personal API token made on /tokens/ (shown once): one team, read-only or "
                              "read-write, sent as `Authorization: Bearer opd_...`; no CSRF token needed. 401 "
                              "says why a token is not accepted (unknown, revoked), 403 why it may not do this "
                              "(read-only, another team), 429 (with Retry-After) that it wrote too often"},
}


def openapi_document(title: str, version: str, endpoints: list[Endpoint]) -> dict:
    """The document says what each endpoint enforces: the query models' limits, the
    path converters' digits, and every refusal (a JSON ``Problem``) it can answer."""
    paths: dict[str, dict] = {}
    components: dict[str, dict] = {}

    def schema_of(model) -> dict:
        schema = TypeAdapter(model).json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        return schema

    for e in endpoints:
        op: dict[str, Any] = {"summary": e.summary, "responses": {}}
        # Django's converters: <int:...> takes digits only, <str:...> one or more characters
        # but no "/"; anything else is a 404.
        params = [
            {"name": name, "in": "path", "required": True, "schema": PATH_CONVERTER_SCHEMAS[converter]}
            for converter, name in re.findall(r"<(int|str):(\w+)>", e.route)
        ]
        refusals = {401, *e.errors}
        if e.method not in ("GET", "HEAD"):
            refusals.update({403, 429})  # a read-only token; a token past its write rate
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
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": SECURITY_SCHEMES},
        # Either one: the browser's session, or a personal API token.
        "security": [{"session": []}, {"bearer": []}],
    }


def _without_nul(schema):
    """``schema`` with ``pattern: NO_NUL`` on each string without a pattern, enum or const
    of its own, so the document says what :func:`opdweb.api.json_input.check_storable` enforces."""
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
