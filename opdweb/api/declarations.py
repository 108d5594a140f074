"""What an app declares of each endpoint, once: the view, its body, query and response
models, its status and refusals.  Validation, the response shape and the OpenAPI
document are all read from it."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel


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
    # A body larger than the site's limit (``DATA_UPLOAD_MAX_MEMORY_SIZE``) that this
    # endpoint takes, read and validated by pydantic straight from the JSON text.
    max_body_bytes: int | None = None

    @property
    def openapi_path(self) -> str:
        return "/api/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", self.route)


class Routes:
    """One app's endpoints, declared with :meth:`route`."""

    def __init__(self) -> None:
        self.endpoints: list[Endpoint] = []

    def route(self, method: str, route: str, *, summary: str, body=None, query=None, response=None,
              status: int = 200, errors: tuple[int, ...] = (), produces: tuple[str, ...] = (), body_schema=None,
              max_body_bytes: int | None = None):
        def register(view):
            self.endpoints.append(Endpoint(method, route, view, summary, body, query, response, status, errors,
                                           produces, body_schema, max_body_bytes))
            return view

        return register
