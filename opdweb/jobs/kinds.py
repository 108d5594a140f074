"""The registry of job kinds: each names its config schema, its science entry point,
its queue, its time limit, and whether a lost run may be resumed (requeued).

Config schemas are pydantic models that import no torch, so the web process validates
configs without loading the GPU stack; the science entry points import torch only when
they run, in the worker.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pydantic import BaseModel

from workers.science.entrypoints import ENTRYPOINTS
from workers.science.selftest import SelftestConfig, run_selftest


@dataclass(frozen=True)
class JobKind:
    name: str
    config_model: type[BaseModel]
    run: Callable  # run(config, reporter) -> dict, called in the worker
    queue: str  # "gpu" or "cpu"
    time_limit_s: int
    resumable: bool = False
    max_attempts: int = 1
    description: str = ""


KINDS: dict[str, JobKind] = {}


def register(kind: JobKind) -> None:
    KINDS[kind.name] = kind


register(
    JobKind(
        name="selftest",
        config_model=SelftestConfig,
        run=run_selftest,
        queue="cpu",
        time_limit_s=3600,
        resumable=True,
        max_attempts=3,
        description="Emits a known series; proves the job path end to end.",
    )
)

# The science's own registry names each kind's schema and entry point; here they get a
# GPU queue and a time limit.  The description is the schema's first docstring line.
SCIENCE_TIME_LIMITS_S = {"mismatch": 2 * 3600, "sensitivity": 8 * 3600, "drift": 2 * 3600}
for _name, (_config, _run) in ENTRYPOINTS.items():
    register(
        JobKind(
            name=_name,
            config_model=_config,
            run=_run,
            queue="gpu",
            time_limit_s=SCIENCE_TIME_LIMITS_S[_name],
            description=(_config.__doc__ or "").strip().splitlines()[0],
        )
    )


class UnknownJobKind(ValueError):
    pass


def get_kind(name: str) -> JobKind:
    try:
        return KINDS[name]
    except KeyError:
        raise UnknownJobKind(f"unknown job kind {name!r}; known kinds: {', '.join(sorted(KINDS))}") from None
