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

from workers.science.config import DriftJobConfig, MismatchJobConfig, SensitivityJobConfig
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


register(
    JobKind(
        name="mismatch",
        config_model=MismatchJobConfig,
        entrypoint="workers.science.entrypoints:run_mismatch",
        queue="gpu",
        time_limit_s=2 * 3600,
        description="Admission measurement: the config's mismatch as a multiple of the BF16 engine's.",
    )
)
register(
    JobKind(
        name="sensitivity",
        config_model=SensitivityJobConfig,
        entrypoint="workers.science.entrypoints:run_sensitivity",
        queue="gpu",
        time_limit_s=8 * 3600,
        description="Per-layer multiples, their ranking, and the smallest keep-BF16 recipe under a target.",
    )
)
register(
    JobKind(
        name="drift",
        config_model=DriftJobConfig,
        entrypoint="workers.science.entrypoints:run_drift",
        queue="gpu",
        time_limit_s=2 * 3600,
        description="Prefix drift of the config's decodes against the BF16 reference under the same seeds.",
    )
)


class UnknownJobKind(ValueError):
    pass


def get_kind(name: str) -> JobKind:
    try:
        return KINDS[name]
    except KeyError:
        raise UnknownJobKind(f"unknown job kind {name!r}; known kinds: {', '.join(sorted(KINDS))}") from None
