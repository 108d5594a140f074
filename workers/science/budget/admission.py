"""The ``admission`` job: may this rollout config be used on this checkpoint?

It measures the config's multiple on the checkpoint's own rollouts (no teacher, no
training; the mismatch job's measurement, on the budget's metric and unit engine) and
gives the verdict of :func:`~workers.science.verdicts.decide`, the margin, the
KV capacity gain, the prefix drift diagnostic and, when asked, the layers that contribute
most and the cheapest recipe within the budget.  A budget calibrated on another checkpoint
(content hash), task, metric or unit pair (engine and trainer) is refused before anything is
measured.
"""
from __future__ import annotations

from ..config import ConfigError, DriftJobConfig, MismatchJobConfig
from ..fingerprint import checkpoint_digest, checkpoint_digest_with_trainer_state
from ..reporting import NullReporter, Reporter, SubReporter
from ..results import MismatchReport, unit_vanishes
from ..verdicts import Decision, decide
from .config import AdmissionJobConfig, BudgetSpec
from .results import AdmissionVerdict


def budget_problems(spec: BudgetSpec, digests: tuple[str | None, ...], task: str, unit_engine: str,
                    unit_trainer: str = "fp32") -> list[str]:
    """Why ``spec`` cannot judge a measurement of the checkpoint whose content is
    ``digests`` (today's digest first, then any earlier rule's a budget may have stored) on
    ``task`` in the unit pair (``unit_engine``, ``unit_trainer``)."""
    problems = []
    if spec.checkpoint_hash and digests[0] and spec.checkpoint_hash not in digests:
        problems.append(f"budget: calibrated on checkpoint {spec.checkpoint!r} (content {spec.checkpoint_hash[:12]}), "
                        f"not on this model (content {digests[0][:12]}); calibrate a budget for this checkpoint")
    if spec.task != task:
        problems.append(f"budget: calibrated on task {spec.task!r}, this check runs {task!r}")
    if spec.unit_engine != unit_engine:
        problems.append(f"budget: its multiples are of the {spec.unit_engine} BF16 engine, this check's unit is "
                        f"{unit_engine}; set reference_engine to {spec.unit_engine}")
    if spec.trainer != unit_trainer:
        problems.append(f"budget: its multiples are against the {spec.trainer} trainer ({spec.pair}), this check's is "
                        f"{unit_trainer}; set trainer_dtype to {spec.trainer}")
    return problems


def run_admission(cfg: AdmissionJobConfig, reporter: Reporter | None = None) -> AdmissionVerdict:
    """The config's multiple on the checkpoint, judged against the budget (module docstring)."""
    from ..mismatch import run_mismatch
    from ..preflight import preflight

    reporter = reporter or NullReporter()
    spec = cfg.budget
    if not isinstance(spec, BudgetSpec):
        raise ConfigError(f"budget #{spec} is an id the product resolves; here give the budget's JSON file (its page "
                          "offers it: /api/budgets/ID/spec)")
    # The pair is the budget's unless asked otherwise (then refused below when it differs).
    reference = spec.unit_engine if cfg.reference_engine in (None, "auto") else cfg.reference_engine
    trainer = spec.trainer if cfg.trainer_dtype == "auto" else cfg.trainer_dtype
    measurement = MismatchJobConfig.model_validate(
        {**cfg.model_dump(include=set(MismatchJobConfig.model_fields)), "reference_engine": reference,
         "trainer_dtype": trainer})
    checked = preflight(measurement)
    digest = checkpoint_digest(cfg.model)
    # The trainer state (as large as the weights or more) is read only for a budget whose
    # hash is not today's: it may be one stored before trainer state was left out.
    digests = (digest,) if spec.checkpoint_hash in (None, "", digest) else (
        digest, checkpoint_digest_with_trainer_state(cfg.model))
    problems = budget_problems(spec, digests, checked.task, checked.unit_engine, checked.trainer_dtype)
    if problems:
        raise ConfigError("; ".join(problems))

    report = run_mismatch(measurement, reporter, checked=checked)
    decided_on, decision = judge(report, spec)
    reporter.log(report.prompts, {"admission/multiple": report.multiple or 0.0,
                                  "admission/budget": spec.budget or 0.0,
                                  "admission/within_budget": float(decision.verdict == "pass")})
    result = {
        **report.model_dump(mode="json"),
        "budget": spec,
        "verdict": decision.verdict,
        "reason": decision.reason,
        "margin": decision.margin,
        "prompts_to_decide": decision.prompts_to_decide,
        "extend": ({"prompts": decision.prompts_to_decide, "seed": report.seed}
                   if decision.prompts_to_decide else None),
        "checkpoint_hash": digest,
        "decided_on": decided_on,
        "absolute_budget": spec.absolute_budget,
        "kv_capacity_gain": report.kv_cache.capacity_ratio,
    }
    undecided = to_decide(decided_on, decision, report, spec)
    if undecided is not None:
        result["to_decide"] = undecided
    result["calibrated_with"] = spec.calibrated_with
    warnings = transfer_warnings(spec, cfg.rollout.mismatch_sources)
    if warnings:
        result["transfer_warnings"] = warnings
    if cfg.drift and not report.identical_to_unit:
        result["drift"] = prefix_drift(cfg, reporter)
    if cfg.recipe and spec.budget:
        from .recipe import recipe_within_budget

        result.update(recipe_within_budget(measurement, spec.budget, cfg.recipe_margin, SubReporter(reporter)))
    reporter.progress(1.0, f"{decision.verdict}: {decision.reason}")
    return AdmissionVerdict.model_validate(result)


def unit_vanished(report: MismatchReport) -> bool:
    """The unit pair measured no mismatch at all (its engine and trainer compute bitwise-equal
    logprobs, as batch-invariant kernels do on purpose): every multiple is undefined."""
    return unit_vanishes(report.reference_value, report.reference_value_ci) and not report.identical_to_unit


def judge(report: MismatchReport, spec: BudgetSpec) -> tuple[str, Decision]:
    """The verdict, on the multiple; where the unit vanished, on the absolute value against
    the budget's absolute value, when the budget recorded its unit (else inconclusive, saying
    why)."""
    if not unit_vanished(report):
        return "multiple", decide(report.multiple, report.multiple_ci, spec.budget, spec.status, report.prompts,
                                  spec.harmful)
    absolute = spec.absolute_budget
    vanished = (f"this check's unit ({report.unit.pair}) measured {report.metric} = {report.reference_value:.2g}, "
                "which cannot be told from zero, so the multiple is undefined")
    if absolute is None:
        return "absolute", Decision("inconclusive", f"{vanished}, and the budget records no unit value to judge the "
                                                    f"absolute {report.metric} against; calibrate in a pair whose unit "
                                                    "is not zero (vllm engine, or an fp32 trainer)", None)
    harmful = spec.harmful * spec.reference_value if spec.harmful and spec.reference_value else None
    d = decide(report.value, report.value_ci, absolute, spec.status, report.prompts, harmful)
    return "absolute", Decision(d.verdict, f"{vanished}; decided on the absolute {report.metric} "
                                           f"{report.value:.3g} against the budget's {absolute:.3g} "
                                           f"({spec.budget:.3g}x its unit's {spec.reference_value:.3g}): {d.reason}",
                                d.margin, d.prompts_to_decide)


def to_decide(decided_on: str, decision: Decision, report: MismatchReport, spec: BudgetSpec) -> dict | None:
    """Where a check is not shown safe, the calibration that would decide it: more seeds at
    the levels that ended the budget below its CI's upper end, or a level there."""
    if decision.verdict != "not_shown_safe" or decided_on != "multiple" or not report.multiple_ci:
        return None
    undecided = spec.to_decide(report.multiple_ci[1])
    if undecided is None:
        return None
    return {"words": undecided.words(), "command": undecided.command(), "levels": list(undecided.levels),
            "max_seeds": undecided.max_seeds}


def transfer_warnings(spec: BudgetSpec, sources: tuple[str, ...]) -> list[str]:
    """A warning for each deployed source of the config (quantization, staleness) that the
    budget's calibration never showed to transfer: its multiple is then assumed, not shown,
    to cost what the same multiple of the calibration's noise costs."""
    deployed = [s for s in sources if s != "noise"]
    shown = {part for kind in spec.shown_to_transfer for part in kind.split("+")}
    return [f"this config's {source} was never shown to transfer to the budget's scale (calibrated with "
            f"{spec.calibrated_with}): the verdict assumes {source} at a multiple costs what that noise does; "
            f"calibrate with a transfer source of {source} to check" for source in deployed if source not in shown]


def prefix_drift(cfg: AdmissionJobConfig, reporter: Reporter) -> dict:
    """First divergence and the share of mismatch after it, on a few prompts: when noise
    changes which prefixes are reached, per-token corrections cannot fix it."""
    from ..drift import run_drift

    drift = run_drift(DriftJobConfig(model=cfg.model, rollout=cfg.rollout, task=cfg.task, prompts=cfg.drift_prompts,
                                     max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, device=cfg.device,
                                     threads=cfg.threads, bootstrap=0), SubReporter(reporter))
    return {"prompts": drift.prompts, "diverged_fraction": drift.diverged_fraction,
            "first_divergence": {k: v for k, v in drift.first_divergence.items() if k != "histogram"},
            "share_after": drift.mismatch_after_divergence["share_after"]}
