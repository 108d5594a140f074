"""Complete job results built by hand, as the science returns them (validated by the kind's
result model): pages and approvals read typed results, so a test's result must be one."""
from __future__ import annotations

from workers.science.budget.results import AdmissionVerdict, CalibrationResult
from workers.science.results import DriftReport, SensitivityReport

KV_FP8 = {"bytes_per_token_bf16": 4096.0, "bytes_per_token": 2048.0, "capacity_ratio": 2.0, "fp8_layers": 2,
          "layers": 2}
UNIT = {"engine": "hf", "dtype": "bf16", "why": "asked for"}


def measured(multiple: float, ci: list[float] | None, prompts: int = 64) -> dict:
    """The measurement part every measuring report shares: k3 at ``multiple`` times 1e-4."""
    return {"metric": "k3", "value": multiple * 1e-4, "reference_value": 1e-4, "multiple": multiple, "multiple_ci": ci,
            "tokens": 16 * prompts, "metrics": {"k3": multiple * 1e-4}, "warnings": []}


def mismatch_report(multiple: float = 3.2, ci: list[float] | None = None, prompts: int = 64, **overrides) -> dict:
    ci = ci if ci is not None else [multiple * 0.8, multiple * 1.2]
    report = {**measured(multiple, ci, prompts), "reference_tokens": 16 * prompts, "reference_metrics": {"k3": 1e-4},
              "summary": {}, "reference_summary": {}, "accuracy": None, "reference_accuracy": None,
              "model": "/models/student", "task": "arithmetic:3", "prompts": prompts, "seed": 0, "rollout": {},
              "reference_rollout": {}, "unit": {**UNIT, "versions": {}}, "floor": {"value": 1.1},
              "units": {"hf": {}}, "unit_factor": None, "identical_to_unit": False, "logprobs": "raw",
              "precision": {"rounds": []}, "trainer_dtype": "fp32", "engine": {}, "kv_cache": KV_FP8,
              "reference_cached": True, "timing": {"total_s": 1.0}}
    return {**report, **overrides}


def admission_result(verdict: str = "pass", multiple: float = 3.2, ci: list[float] | None = None, *, budget: dict,
                     **overrides) -> dict:
    """An admission check's stored result against ``budget`` (a budget's ``spec()``)."""
    result = {**mismatch_report(multiple, ci), "budget": budget, "verdict": verdict, "reason": f"{verdict} (a test)",
              "margin": (budget["budget"] or 0.0) / multiple, "prompts_to_decide": None, "extend": None,
              "checkpoint_hash": budget.get("checkpoint_hash"), "kv_capacity_gain": 2.0, **overrides}
    return AdmissionVerdict.model_validate(result).model_dump(mode="json")


def sensitivity_report(ranking: list[dict], granularity: str | None = "layer", recipe: dict | None = None,
                       multiple: float = 5.0) -> dict:
    """A scan's report; ``granularity`` None: one stored before the report recorded it."""
    rows = [{"value": None, **row} for row in ranking]
    report = {**measured(multiple, None), "model": "/models/student", "task": "arithmetic:3", "prompts": 64,
              **({"granularity": granularity} if granularity else {}), "rollout": {}, "unit": UNIT, "ranking": rows,
              "recipe": recipe,
              "kv_cache": KV_FP8, "timing": {"total_s": 1.0, "measurements": 4}}
    return SensitivityReport.model_validate(report).model_dump(mode="json")


def drift_report(sequences: int, diverged_fraction: float, first_divergence: dict, curve: list[float]) -> dict:
    body = {k: v for k, v in measured(2.0, None).items() if k != "metrics"}
    report = {**body, "model": "/models/student", "task": "arithmetic:3", "prompts": sequences,
              "decode": "sampled", "rollout": {}, "sequences": sequences, "diverged_fraction": diverged_fraction,
              "first_divergence": first_divergence, "identical_prefix_fraction": {},
              "identical_prefix_curve": curve,
              "mismatch_after_divergence": {"share_after": None}, "unit": UNIT, "bootstrap": 0, "accuracy": None,
              "reference_accuracy": None, "timing": {"total_s": 1.0}}
    return DriftReport.model_validate(report).model_dump(mode="json")


def calibration_result(checkpoint: str, budget: float | None, **overrides) -> dict:
    """A calibration's stored result: a budget of ``budget`` on ``checkpoint``, bracketed by ten times it."""
    result = {"checkpoint": checkpoint, "checkpoint_hash": "abc", "teacher": "", "task": "arithmetic:1",
              "method": "opd:full", "metric": "k3", "unit_engine": "hf", "reference_value": 1e-4, "step": 0,
              "tolerance": 1.4, "curve": [], "baseline": {"accuracies": [0.5], "mean": 0.5, "sd": 0.0},
              "budget": budget, "status": "reached", "bracket": [budget, budget * 10 if budget else None], "rule": "r",
              "steps": 2, "seeds": 1, "seed_z": 1.0, "extensions": 0, "noise": [], **overrides}
    return CalibrationResult.model_validate(result).model_dump(mode="json")
