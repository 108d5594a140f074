"""The typed result of each measuring job kind: what ``mismatch``, ``sensitivity``,
``drift`` and ``selftest`` return, and what the product stores and reads back.

Light on purpose (pydantic and the standard library only): the web process validates and
reads stored results with these models and must never import numpy or torch.  A result's
JSON form (``model_dump(mode="json")``) is exactly the report the job has always stored:
the same keys and values, so stored rows, pages and scripts read old and new results
alike.  Keys a report carries only sometimes (a mismatch report's ``buckets``, an
admission's ``drift``) are declared in ``optional_keys`` and left out when not set.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar, Sequence

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

#: A multiple's 95% bootstrap CI ``[low, high]`` (None: too few prompts to bootstrap).
CI = list[float | None] | None
#: A count or a quantity (an int stays an int in the JSON).
Number = int | float


def multiple_of(value: float, unit_value: float) -> float | None:
    """A mismatch as a multiple of the unit's: ``value / unit_value`` (the admission check's
    multiple, and a cluster run's against its checkpoint's BF16 unit).  A unit of zero gives
    no multiple for a zero value and an infinite one otherwise."""
    if unit_value == 0:
        return None if value == 0 else math.inf
    return float(value / unit_value)


def unit_vanishes(unit_value: float | None, unit_ci: Sequence[float | None] | None) -> bool:
    """Whether the unit pair measured no mismatch that can be told from zero: its value is 0, or
    its 95 % CI over prompts reaches 0 (only a few prompts' tokens differ at all), as when the
    engine and the trainer compute (nearly) the same logprobs, which batch-invariant kernels do
    on purpose.  A multiple of such a unit is undefined.  A small unit that every prompt shows
    (a confident model's BF16 rounding, 1e-9 nats) is still a unit."""
    if unit_value is None:
        return False
    if unit_value <= 0:
        return True
    low = unit_ci[0] if unit_ci else None
    return low is not None and low <= 0


def unit_pair(engine: str, trainer: str | None) -> str:
    """A unit pair in words: ``vllm BF16 engine / bf16 trainer`` (no trainer recorded: fp32)."""
    return f"{engine} BF16 engine / {trainer or 'fp32'} trainer"


class JobResult(BaseModel):
    """Base of every kind's result: unknown keys are refused (a malformed result fails the
    job that produced it), and keys in ``optional_keys`` are dumped only when set."""

    model_config = ConfigDict(extra="forbid")
    optional_keys: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _without_absent_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in self.optional_keys - self.model_fields_set:
            data.pop(key, None)
        return data


class KvCapacity(JobResult):
    """KV-cache bytes per token under a config against BF16's (:func:`~.capacity.kv_capacity`);
    for a model with sliding-window layers, how many, and the same at its longest context."""

    optional_keys = frozenset({"sliding_layers", "at_context"})

    bytes_per_token_bf16: float
    bytes_per_token: float
    capacity_ratio: float
    fp8_layers: int
    layers: int
    sliding_layers: int | None = None
    at_context: dict[str, Number] | None = None


class UnitOfMultiple(JobResult):
    """The unit pair a multiple is measured in: the BF16 engine and the trainer that scores its
    tokens (``trainer``: the precision it computes logprobs in; absent from results measured
    before the pair was named, which were all against an fp32 trainer), and why that engine."""

    optional_keys = frozenset({"versions", "trainer"})

    engine: str
    dtype: str
    trainer: str | None = None
    why: str | None = None

    @property
    def pair(self) -> str:
        return unit_pair(self.engine, self.trainer)
    versions: dict[str, Any] | None = None


class Comparison(JobResult):
    """A measurement against its BF16 reference: the body every measuring report shares."""

    optional_keys = frozenset({"buckets", "value_ci", "reference_value_ci"})

    metric: str
    value: float | None
    value_ci: CI = None  # the absolute value's 95 % CI over prompts (reports before it had none)
    reference_value_ci: CI = None  # the unit's, likewise
    reference_value: float | None
    multiple: float | None
    multiple_ci: CI
    tokens: int
    reference_tokens: int
    metrics: dict[str, float | None]
    reference_metrics: dict[str, float | None]
    summary: dict[str, Any]
    reference_summary: dict[str, Any]
    accuracy: float | None
    reference_accuracy: float | None
    buckets: list[dict[str, Any]] | None = None


class MismatchReport(Comparison):
    """The ``mismatch`` job: a rollout config's multiple of the BF16 unit's mismatch, with
    how far it can be trusted (floor, precision rounds, warnings)."""

    model: str
    task: str
    prompts: int
    seed: int
    rollout: dict[str, Any]
    reference_rollout: dict[str, Any]
    unit: UnitOfMultiple
    floor: dict[str, Any]
    units: dict[str, dict[str, Any]]
    unit_factor: dict[str, Any] | None
    identical_to_unit: bool
    logprobs: str
    precision: dict[str, Any]
    warnings: list[str]
    trainer_dtype: str
    engine: dict[str, Any]
    kv_cache: KvCapacity
    reference_cached: bool
    timing: dict[str, Number]


class SensitivityRow(JobResult):
    """One scanned part of the model (a layer, a module or a KV cache) perturbed alone."""

    unit: str  # the part's label, e.g. "layer 3" or "model.layers.3.mlp.up_proj"
    multiple: float | None
    multiple_ci: CI
    value: float | None
    rank: int
    tier: int | None = None  # parts of one tier have overlapping CIs (scans stored before tiers have none)
    prompts: int | None = None  # the prompts its CI is over (more for a part measured again to separate the top)


class SensitivityReport(JobResult):
    """The ``sensitivity`` job: parts ranked by their multiple, and the recipe search."""

    optional_keys = frozenset({"granularity", "separation"})

    metric: str
    model: str
    task: str
    prompts: int
    #: "layer" or "module": what one scanned part is (absent from reports stored before it was recorded)
    granularity: str | None = None
    rollout: dict[str, Any]
    unit: UnitOfMultiple
    warnings: list[str]
    value: float | None
    reference_value: float | None
    multiple: float | None
    multiple_ci: CI
    tokens: int
    metrics: dict[str, float | None]
    ranking: list[SensitivityRow]
    #: the rounds that measured the top tier again: {"rounds", "prompts", "budget_spent", "separated"}
    separation: dict[str, Any] | None = None
    recipe: dict[str, Any] | None
    kv_cache: KvCapacity
    timing: dict[str, Number]


class DriftReport(JobResult):
    """The ``drift`` job: where perturbed decodes leave the reference's, and the share of
    the mismatch after that point (``coupling``: how the two engines shared random numbers;
    absent from reports made before it was a setting, which used ``inverse_cdf``)."""

    optional_keys = frozenset({"coupling"})

    model: str
    task: str
    prompts: int
    decode: str
    coupling: str | None = None
    rollout: dict[str, Any]
    sequences: int
    diverged_fraction: float
    first_divergence: dict[str, Any]
    identical_prefix_fraction: dict[str, float]
    identical_prefix_curve: list[float]
    mismatch_after_divergence: dict[str, Any]
    metric: str
    value: float | None
    reference_value: float | None
    multiple: float | None
    multiple_ci: CI
    unit: UnitOfMultiple
    bootstrap: int
    warnings: list[str]
    tokens: int
    accuracy: float | None
    reference_accuracy: float | None
    timing: dict[str, Number]


class SelftestResult(JobResult):
    """The ``selftest`` job: how many steps it logged and the last value of each series."""

    steps: int
    last: dict[str, float]


__all__ = ["CI", "Comparison", "DriftReport", "JobResult", "KvCapacity", "MismatchReport", "Number", "SelftestResult",
           "SensitivityReport", "SensitivityRow", "UnitOfMultiple", "multiple_of"]
