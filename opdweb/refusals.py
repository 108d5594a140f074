"""A request that cannot be honoured, with the HTTP status to answer it with.

Every app raises :class:`Refused`; the API layer and the pages turn it into a 4xx with the
message (and, for invalid fields, one ``{field, message}`` per problem), with ``headers``
when the answer needs some (``Retry-After`` on a 429, ``WWW-Authenticate`` on a 401).
"""
from __future__ import annotations

from pydantic import BaseModel, ValidationError

from workers.science.config import validation_problems

#: On a 503 (the database or the job queue unreachable): when a client may try again.
RETRY_AFTER_OUTAGE = {"Retry-After": "5"}


class Refused(ValueError):
    def __init__(self, message: str, status: int = 400, details: list | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.details = details or []
        self.headers = headers or {}

    @classmethod
    def invalid(cls, exc: ValidationError, what: str, root: str, model: type[BaseModel] | None = None) -> "Refused":
        """A 400 naming every invalid field of ``what`` (of ``model``, whose field names an
        unknown one's "did you mean" comes from); ``root`` names the whole object."""
        details = validation_problems(exc, root=root, model=model)
        summary = "; ".join(f"{d['field']}: {d['message']}" for d in details)
        return cls(f"{what}: {summary}" if what else summary, details=details)
