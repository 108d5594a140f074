"""The registry of job kinds: each names its config schema, its science entry point,
its queue, its time limit, and whether a lost run may be resumed (requeued).

Config schemas are pydantic models that import no torch, so the web process validates
configs without loading the GPU stack; the entry point is imported only in the worker.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from pydantic import BaseModel

from workers.science.selftest import SelftestConfig


@dataclass(frozen=True)
class JobKind:
    name: str
    config_model: type[BaseModel]
    entrypoint: str  # "module:function", imported in the worker only
    queue: str  # "gpu" or "cpu"
    time_limit_s: int
    resumable: bool = False
    max_attempts: int = 1
    description: str = ""

    def load_entrypoint(self) -> Callable:
        module, _, func = self.entrypoint.partition(":")
        return getattr(importlib.import_module(module), func)


KINDS: dict[str, JobKind] = {}


def register(kind: JobKind) -> None:
    KINDS[kind.name] = kind


register(
    JobKind(
        name="selftest",
        config_model=SelftestConfig,
        entrypoint="workers.science.selftest:run_selftest",
        queue="cpu",
        time_limit_s=3600,
        resumable=True,
        max_attempts=3,
        description="Emits a known series; proves the job path end to end.",
    )
)


class UnknownJobKind(ValueError):
    pass


def get_kind(name: str) -> JobKind:
    try:
        return KINDS[name]
    except KeyError:
        raise UnknownJobKind(f"unknown job kind {name!r}; known kinds: {', '.join(sorted(KINDS))}") from None
