"""Template context every page gets: the job kinds' names, so templates compare against
``Kind.ADMISSION`` rather than spelling a kind's name."""
from __future__ import annotations

from types import SimpleNamespace

from workers.science.kinds import Kind

#: ``{{ Kind.ADMISSION }}`` in a template (a namespace: Django would call the enum class).
KIND_NAMES = SimpleNamespace(**{kind.name: kind.value for kind in Kind})


def job_kinds(request) -> dict:
    return {"Kind": KIND_NAMES}
