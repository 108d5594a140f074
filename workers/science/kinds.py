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


__all__ = ["Kind"]
