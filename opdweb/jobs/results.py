"""A job's stored result read back as its kind's typed result model (the science declares
one per kind: ``JobKind.result``); what pages, budgets and approvals read."""
from __future__ import annotations

from pydantic import BaseModel

from workers.science.entrypoints import MalformedResult, UnknownJobKind, get_kind


def typed_result(job) -> BaseModel | None:
    """``job``'s stored result as its kind's result model, or None (no result, an unknown
    kind, or a result that is not its kind's)."""
    if job.result is None:
        return None
    try:
        return get_kind(job.kind).validated(job.result)
    except (UnknownJobKind, MalformedResult):
        return None
