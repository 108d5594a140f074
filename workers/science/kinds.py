"""The names of the job kinds, spelled once.

Light on purpose (no numpy, no torch, no pydantic): the web process, templates' context,
the worker and the CLI all compare against these. What each kind *is* (schema, entry
point, queue, result type) is declared in :mod:`workers.science.entrypoints`.
"""
from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    SELFTEST = "selftest"
    MISMATCH = "mismatch"
    SENSITIVITY = "sensitivity"
    DRIFT = "drift"
    TRAIN = "train"
    TIME_TO_QUALITY = "time-to-quality"
    NOISE_SOLVE = "noise-solve"
    CALIBRATION = "calibration"
    ADMISSION = "admission"
    DESCRIBE = "describe"
    EXTERNAL = "external"


#: Kinds whose jobs run outside the product and report into it (a cluster trainer's run,
#: logged through the MLflow-compatible endpoints): no config schema, no entry point, never
#: queued, so they are not in the registry of runnable kinds (``entrypoints.KINDS``); the
#: job list and its filters show them beside those.
EXTERNAL_KINDS: tuple[Kind, ...] = (Kind.EXTERNAL,)


__all__ = ["EXTERNAL_KINDS", "Kind"]
