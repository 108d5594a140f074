"""The ``mismatch`` job: a rollout config's mismatch as a multiple of BF16's.

Every metric of :mod:`.metrics` is computed over response tokens of the session's prompts
(:mod:`.measurement`).  The **unit** is a named BF16 engine (``vllm`` where it can run, else
``hf``), measured the same way on the same prompts and seeds; the multiple, its floor and
the stop rule are :mod:`.multiple`'s.  Prompts are measured in rounds until the CI's
half-width is within ``target_ci`` of the multiple or the token budget is spent, with a
warning when the CI is still too wide to decide.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .config import MAX_PROMPTS, MismatchJobConfig, RolloutConfig
from .measurement import Measurement, MeasurementSession
from .multiple import compare, floor_from, next_round_size, precision, stop_reason, top_share, unit_block
from .reporting import Reporter
from .results import Comparison, MismatchReport, unit_vanishes


class EnginePool:
    """One engine per rollout config, closed together; the seed is per sampling call, so
    the floor's second seed shares the unit's engine."""

    def __init__(self, session: MeasurementSession) -> None:
        self.session = session
        self.engines: dict[str, Any] = {}

    def of(self, cfg: RolloutConfig) -> Any:
        key = json.dumps(cfg.model_dump(mode="json", exclude={"seed"}), sort_keys=True)
        if key not in self.engines:
            self.engines[key] = self.session.engine(cfg)
        return self.engines[key]

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()


@dataclass
class Rounds:
    """The measurements of every round so far, each extended by the next round's prompts."""

    ref: Measurement | None = None
    floor: Measurement | None = None
    config: Measurement | None = None
    others: dict[str, tuple[Measurement, Measurement]] = field(default_factory=dict)  # other unit: (ref, floor)
    rows: list[dict] = field(default_factory=list)
    stopped: str | None = None


def _joined(before: Measurement | None, more: Measurement) -> Measurement:
    return more if before is None else before.extended(more)


def _progress_slices(round_index: int) -> tuple[tuple[float, float], tuple[float, float], tuple[float, float]]:
    """Round ``round_index``'s share of the progress bar, in thirds: reference, floor, config."""
    lo = min(0.9, 0.9 * (1 - 0.5 ** round_index))
    hi = min(0.95, 0.9 * (1 - 0.5 ** (round_index + 1)))
    third = (hi - lo) / 3
    return (lo, lo + third), (lo + third, lo + 2 * third), (lo + 2 * third, hi)


class MismatchRun:
    """One mismatch job: the session, its unit, the engines, and the rounds measured."""

    def __init__(self, cfg: MismatchJobConfig, reporter: Reporter | None, checked: Any, keep: bool) -> None:
        self.cfg = cfg
        self.session = MeasurementSession.open(cfg, reporter, checked)
        self.reporter = self.session.reporter
        self.rollout = self.session.rollout
        self.ref_cfg = self.session.reference_config()
        self.is_unit = self.rollout == self.ref_cfg
        self.keep = keep
        self.other_unit = self._other_unit()
        self.engines = EnginePool(self.session)
        self.rounds = Rounds()

    def _other_unit(self) -> str | None:
        """The other BF16 engine, with ``compare_units`` and where it can run here."""
        if not self.cfg.compare_units:
            return None
        other = "hf" if self.session.unit_engine == "vllm" else "vllm"
        if other == "vllm":
            from .preflight import vllm_problems

            why = vllm_problems(self.rollout.bf16_reference("vllm"), self.session.model_config, self.cfg.device,
                                "reference")
            if why:
                self.session.warnings.append("compare_units: no vllm unit here (" + "; ".join(why) + ")")
                return None
        return other

    def trace(self, label: str) -> Callable[[int, Any], None]:
        """A per-batch callback logging ``mismatch/{label}_{metric}`` as the measurement grows."""
        from .metrics import metric_values, summarize

        def on_batch(batch: int, records: Any) -> None:
            v = metric_values(summarize(records)).get(self.cfg.metric)
            if v is not None:
                self.reporter.log(batch, {f"mismatch/{label}_{self.cfg.metric}": v})
        return on_batch

    # -- the rounds -----------------------------------------------------------------
    def measure_all(self) -> Rounds:
        """Rounds of prompts until the stop rule says enough (:func:`.multiple.stop_reason`)."""
        start, size = 0, self.cfg.prompts
        try:
            while self.rounds.stopped is None:
                stop = self.session.extend_prompts(start + size)
                if stop <= start:
                    self.rounds.stopped = "prompts exhausted"
                    break
                rel = self.measure_round(start, stop)
                self.rounds.stopped = stop_reason(rel, self.cfg.target_ci, self.tokens, self.cfg.max_tokens, stop,
                                                  MAX_PROMPTS)
                if self.rounds.stopped is None and stop < start + size:
                    self.rounds.stopped = "prompts exhausted"
                start, size = stop, next_round_size(stop, rel, self.cfg.target_ci, self.cfg.prompts)
        finally:
            self.engines.close()
        return self.rounds

    @property
    def tokens(self) -> int:
        return self.rounds.config.records.tokens if self.rounds.config is not None else 0

    def measure_round(self, start: int, stop: int) -> float | None:
        """Measure prompts ``[start, stop)`` with every engine; the CI's relative half-width so far."""
        from .metrics import finite_or_none, mean_with_ci, multiple_with_ci, token_mean

        r = self.rounds
        ref_slice, floor_slice, cfg_slice = _progress_slices(len(r.rows))
        r_ref = self._measure_unit(ref_slice, start, stop)
        fcfg = self.session.floor_config(self.ref_cfg)
        r_floor = self.session.reference(fcfg, floor_slice, engine=lambda: self.engines.of(fcfg), start=start,
                                         stop=stop)
        r_cfg = r_ref if self.is_unit else self.session.measure(
            self.rollout, "rollout config", cfg_slice, keep=self.keep, engine=self.engines.of(self.rollout),
            on_batch=self.trace("rollout"), start=start, stop=stop)
        r.ref, r.floor = _joined(r.ref, r_ref), _joined(r.floor, r_floor)
        r.config = r.ref if self.is_unit else _joined(r.config, r_cfg)
        if self.other_unit:
            self._measure_other_unit(self.other_unit, start, stop)
        metric, n_boot, seed = self.cfg.metric, self.cfg.bootstrap, self.cfg.seed_effective
        value, ci = multiple_with_ci(r.config.records, r.ref.records, metric, stop, n_boot, seed=seed)
        vanished = unit_vanishes(token_mean(r.ref.records, metric), mean_with_ci(r.ref.records, metric, stop, n_boot,
                                                                                 seed=seed))
        if vanished:
            value, ci = None, None
        absolute = token_mean(r.config.records, metric)
        absolute_ci = mean_with_ci(r.config.records, metric, stop, n_boot, seed=seed) if vanished else None
        rel, of = precision(finite_or_none(value), ci, absolute, absolute_ci, vanished)
        r.rows.append({"prompts": stop, "tokens": r.config.records.tokens, "multiple": finite_or_none(value),
                       "multiple_ci": ci, "value": absolute, "relative_half_width": rel, "of": of})
        self.reporter.log(len(r.rows), {"mismatch/round_multiple": value}
                          if value is not None and math.isfinite(value) else {})
        return rel

    def _measure_unit(self, frac: tuple[float, float], start: int, stop: int) -> Measurement:
        """The BF16 unit on this round's prompts: from the reference cache, unless the config
        is the unit itself and its rollouts are to be kept (a dump)."""
        if self.is_unit and self.keep:
            return self.session.measure(self.ref_cfg, "BF16 unit", frac, keep=True,
                                        engine=self.engines.of(self.ref_cfg), start=start, stop=stop)
        return self.session.reference(self.ref_cfg, frac, self.trace("reference"),
                                      engine=lambda: self.engines.of(self.ref_cfg), start=start, stop=stop)

    def _measure_other_unit(self, name: str, start: int, stop: int) -> None:
        ocfg = self.rollout.bf16_reference(name)
        fcfg = self.session.floor_config(ocfg)
        o_ref = self.session.reference(ocfg, engine=lambda: self.engines.of(ocfg), start=start, stop=stop)
        o_fl = self.session.reference(fcfg, engine=lambda: self.engines.of(fcfg), start=start, stop=stop)
        prev = self.rounds.others.get(name)
        self.rounds.others[name] = (o_ref, o_fl) if prev is None else (prev[0].extended(o_ref), prev[1].extended(o_fl))

    # -- the report -----------------------------------------------------------------
    def report(self) -> MismatchReport:
        """The rounds measured, as the job's report."""
        from .capacity import kv_capacity
        from .engines.base import LOGPROB_TRANSFORM
        from .metrics import json_safe

        cfg, session, r = self.cfg, self.session, self.rounds
        assert r.ref is not None and r.floor is not None and r.config is not None
        n = max(r.config.records.n_sequences, r.ref.records.n_sequences)
        body = compare(session, r.config, r.ref, cfg.metric, cfg.bootstrap, cfg.position_buckets)
        floor = floor_from(r.ref, r.floor, cfg.metric, n, cfg.bootstrap, cfg.seed_effective)
        units, unit_factor = self.units(body, floor, n)
        rel, of = precision(body.multiple, body.multiple_ci, body.value, body.value_ci,
                            unit_vanishes(body.reference_value, body.reference_value_ci))
        share = top_share(r.config.records, cfg.metric)
        extra = {
            "model": cfg.model, "task": session.task, "prompts": n, "seed": cfg.seed_effective,
            "rollout": self.rollout.model_dump(mode="json"), "reference_rollout": self.ref_cfg.model_dump(mode="json"),
            "unit": {"engine": session.unit_engine, "dtype": "bf16", "trainer": session.trainer_dtype,
                     "why": session.unit_reason, "versions": units[session.unit_engine]["versions"]},
            "floor": floor, "units": units, "unit_factor": unit_factor, "identical_to_unit": self.is_unit,
            "logprobs": LOGPROB_TRANSFORM,
            "precision": {"target_ci": cfg.target_ci, "max_tokens": cfg.max_tokens, "relative_half_width": rel,
                          "of": of, "stopped": r.stopped, "rounds": r.rows, "top1pct_share": share},
            "warnings": self.warnings(body, floor, rel, of, share), "trainer_dtype": session.trainer_dtype,
            "engine": r.config.engine_info,
            "kv_cache": kv_capacity(session.model_config, session.kv_layer_formats(self.rollout)),
            "reference_cached": r.ref.cached, "timing": self.timing(),
        }
        return MismatchReport.model_validate({**body.model_dump(mode="json"), **json_safe(extra)})

    def units(self, body: Comparison, floor: dict, n: int) -> tuple[dict[str, dict], dict | None]:
        """The multiple against each BF16 unit measured, and the factor between the two units."""
        from .metrics import finite_or_none, multiple_with_ci

        cfg, session, r = self.cfg, self.session, self.rounds
        assert r.ref is not None and r.config is not None
        known = (body.reference_value, body.multiple, body.multiple_ci)
        units = {session.unit_engine: unit_block(session, session.unit_engine, r.ref, floor, r.config, cfg.metric, n,
                                                 cfg.bootstrap, known)}
        unit_factor = None
        for name, (o_ref, o_fl) in r.others.items():
            o_floor = floor_from(o_ref, o_fl, cfg.metric, n, cfg.bootstrap, cfg.seed_effective)
            units[name] = unit_block(session, name, o_ref, o_floor, r.config, cfg.metric, n, cfg.bootstrap)
            hf_ref, vllm_ref = (r.ref, o_ref) if session.unit_engine == "hf" else (o_ref, r.ref)
            f, f_ci = multiple_with_ci(vllm_ref.records, hf_ref.records, cfg.metric, n, cfg.bootstrap,
                                       seed=cfg.seed_effective)
            unit_factor = {"what": "vllm BF16 unit / hf BF16 unit (the hf multiple divided by this is the vllm "
                                   "multiple)", "value": finite_or_none(f), "ci": f_ci}
        return units, unit_factor

    def warnings(self, body: Comparison, floor: dict, rel: float | None, of: str,
                 share: float | None) -> list[str]:
        """The session's warnings, and what limits how far this multiple can be trusted."""
        cfg, metric, tokens = self.cfg, self.cfg.metric, self.tokens
        out = list(self.session.warnings)
        if rel is None or rel > cfg.target_ci > 0:
            what = "the multiple" if of == "multiple" else f"the absolute {metric}"
            width = "no CI" if rel is None else f"the 95% CI is ±{rel:.0%} of {what}"
            out.append(f"precision: {width} after {tokens} tokens ({self.rounds.stopped}), wider than the target "
                       f"±{cfg.target_ci:.0%}: too wide to decide; raise max_tokens or prompts")
        ci = body.multiple_ci
        if not self.is_unit and floor["value"] is not None and ci is not None and ci[0] is not None \
                and ci[0] <= floor["value"]:
            out.append(f"floor: the CI's lower end {ci[0]:.3g} is within the BF16 unit's own spread (floor "
                       f"{floor['value']:.3g}x): this multiple cannot be told apart from BF16")
        if unit_vanishes(body.reference_value, body.reference_value_ci):
            out.append(f"reference: the unit's {metric} is {body.reference_value:.2g} and cannot be told from zero "
                       f"(its 95% CI reaches 0), so the multiple is undefined; the absolute {metric} and its CI "
                       "still stand")
        if share is not None and share > 0.5:
            out.append(f"tail: the top 1% of tokens carry {share:.0%} of {metric}; the multiple rests on a few tokens")
        return out

    def timing(self) -> dict[str, float]:
        r = self.rounds
        assert r.ref is not None and r.config is not None
        return {"sample_s": r.config.sample_seconds if not self.is_unit else 0.0,
                "score_s": r.config.score_seconds if not self.is_unit else 0.0,
                "reference_sample_s": r.ref.sample_seconds, "reference_score_s": r.ref.score_seconds,
                "total_s": self.session.elapsed()}


def run_mismatch(cfg: MismatchJobConfig, reporter: Reporter | None = None, dump_path: str | Path | None = None,
                 checked: Any = None) -> MismatchReport:
    """Admission measurement of ``cfg.rollout`` on ``cfg.model`` (``checked``: the config's
    preflight, where the caller already ran it; ``dump_path``: also write every response)."""
    run = MismatchRun(cfg, reporter, checked, keep=dump_path is not None)
    rounds = run.measure_all()
    report = run.report()
    if report.multiple is not None and report.value is not None:
        run.reporter.log(report.prompts, {f"mismatch/{cfg.metric}": report.value, "mismatch/multiple": report.multiple})
    if dump_path is not None and rounds.config is not None:
        write_dump(dump_path, rounds.config)
    run.reporter.progress(1.0, "done")
    return report


def write_dump(path: str | Path, m: Measurement) -> int:
    """One JSON line per response: prompt and response token ids, both logprob lists."""
    lines = 0
    with open(path, "w") as fh:
        for r, s in zip(m.rollouts, m.trainer_scores, strict=True):
            for i in range(r.tokens.shape[0]):
                mask = r.mask[i]
                fh.write(json.dumps({
                    "prompt_ids": r.prompt_ids[i],
                    "token_ids": r.tokens[i][mask].tolist(),
                    "logprobs_rollout": [round(float(x), 7) for x in r.logprobs[i][mask]],
                    "logprobs_trainer": [round(float(x), 7) for x in s.logprobs[i][mask]],
                }) + "\n")
                lines += 1
    return lines
