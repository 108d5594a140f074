"""A person's chart layout (:class:`~opdweb.jobs.models.ChartLayout`): what the job page
draws it from, and the endpoint the page saves it to as the person pins, hides and folds.
Bad input is a JSON 400 saying what is wrong; the layout stored stays as it was."""
from __future__ import annotations

import json
from typing import Annotated

from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.views.decorators.http import require_http_methods
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from opdweb.jobs.models import ChartLayout

MAX_BODY_BYTES = 64 * 1024
#: A chart or section name: what the page groups series under (a series key is at most 250).
Name = Annotated[str, StringConstraints(max_length=300, pattern=r"^[^\x00]*$")]
Names = Annotated[list[Name], Field(max_length=500)]


class LayoutIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    pinned: Names = []
    hidden: Names = []
    folded: Names = []


def layout_of(user) -> dict:
    """The person's layout, empty where they have not changed one."""
    layout = ChartLayout.objects.filter(user=user).first()
    return layout.as_dict() if layout else {"pinned": [], "hidden": [], "folded": []}


@login_required
@require_http_methods(["GET", "POST"])
def chart_layout(request):
    if request.method == "GET":
        return JsonResponse(layout_of(request.user))
    if len(request.body) > MAX_BODY_BYTES:
        return JsonResponse({"error": f"a chart layout is at most {MAX_BODY_BYTES:,} bytes"}, status=413)
    try:
        layout = LayoutIn.model_validate(json.loads(request.body or b"null"))
    except (ValueError, RecursionError) as exc:  # bad JSON, or a ValidationError
        return JsonResponse({"error": _reason(exc)}, status=400)
    ChartLayout.objects.update_or_create(user=request.user, defaults={
        "pinned": sorted(set(layout.pinned)), "hidden": sorted(set(layout.hidden)),
        "folded": sorted(set(layout.folded))})
    return JsonResponse(layout_of(request.user))


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'layout'}: {e['msg']}" for e in exc.errors())
    if isinstance(exc, RecursionError):
        return "the layout is nested too deeply"
    return f"not JSON: {exc}"
