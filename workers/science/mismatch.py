"""The admission measurement: a rollout config's mismatch as a multiple of BF16's.

The rollout engine samples the student's responses; the trainer (the same checkpoint at
full precision) scores exactly those tokens, both under the same logprob transform
(:data:`~.engines.base.LOGPROB_TRANSFORM`); every metric of :mod:`.metrics` is computed over
response tokens.  The **unit** is a named BF16 engine (``vllm`` where it can run, else
``hf``), measured the same way on the same prompts and seeds; the **multiple** is the
primary metric (default k3) over the unit's, with a paired bootstrap CI over prompts.

How far a multiple can be trusted is reported with it:

* the **floor**: the unit against itself under a second seed; a multiple whose CI reaches
  below the floor cannot be told apart from BF16;
* **sample size by precision**: prompts are measured in rounds until the CI's half-width
  is within ``target_ci`` of the multiple or the token budget is spent, with a warning
  when the CI is still too wide to decide;
* the share of the metric carried by the top 1% of tokens (heavy tails make wide CIs).
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .config import MAX_PROMPTS, MAX_SEED, ConfigError, MismatchJobConfig, RolloutConfig, _JobConfig
from .reporting import Cancelled, NullReporter, Reporter

#: Below this reference value (k3-like, nats) the multiple divides by ~0 and means nothing.
NEGLIGIBLE_REFERENCE = 1e-7


@dataclass
class Measurement:
    """One engine's rollouts on a range of the session's prompts, scored by the trainer."""

    label: str
    cfg: RolloutConfig
    records: "object"  # metrics.TokenRecords
    accuracy: float | None
    sample_seconds: float
    score_seconds: float
    rollouts: list = field(default_factory=list)  # kept only when asked (drift, dumps)
    trainer_scores: list = field(default_factory=list)
    engine_info: dict = field(default_factory=dict)
    cached: bool = False
    correct: int | None = None  # graded responses that were right
    graded: int = 0

    def extended(self, more: "Measurement") -> "Measurement":
        """This measurement and ``more`` (the next prompts) as one."""
        from .metrics import TokenRecords

        records = TokenRecords.concat([self.records, more.records])
        records.n_sequences = max(self.records.n_sequences, more.records.n_sequences)
        correct = None if self.correct is None or more.correct is None else self.correct + more.correct
        graded = self.graded + more.graded
        return Measurement(self.label, self.cfg, records, correct / graded if correct is not None and graded else None,
                           self.sample_seconds + more.sample_seconds, self.score_seconds + more.score_seconds,
                           self.rollouts + more.rollouts, self.trainer_scores + more.trainer_scores,
                           self.engine_info or more.engine_info, self.cached and more.cached, correct, graded)


class MeasurementSession:
    """Prompts, tokenizer and the trainer reference, loaded once for many measurements.

    Construction runs :func:`~.preflight.preflight` first: every check that can refuse
    the job runs before any weights are read."""

    def __init__(self, job: _JobConfig, reporter: Reporter | None = None, checked=None) -> None:
        from .preflight import preflight

        self.started = time.perf_counter()
        checked = checked or preflight(job)
        import torch

        from . import engines  # noqa: F401 - hides a broken torchvision before transformers loads
        from .engines.hf import HFEngine, load_tokenizer, resolve_device

        self.job = job
        self.checked = checked
        self.warnings: list[str] = list(checked.warnings)
        self.reporter = reporter or NullReporter()
        if job.threads:
            torch.set_num_threads(job.threads)
        self.device = resolve_device(job.device)
        self.task = checked.task
        self.tokenizer = load_tokenizer(job.model)
        self.prompt_ids: list[list[int]] = []
        self.prompt_set = None
        self.extend_prompts(job.prompts)
        self.trainer = HFEngine.trainer(job.model, job.trainer_dtype, self.device)
        self.model_config = self.trainer.model.config
        self.base_model = self.trainer.model if job.trainer_dtype == "fp32" else None
        self.rollout = job.rollout_effective
        self.unit_engine = checked.unit_engine
        self.unit_reason = checked.unit_reason

    @classmethod
    def open(cls, job: _JobConfig, reporter: Reporter | None = None, checked=None) -> "MeasurementSession":
        """A session for ``job``, refused before anything is loaded when the job cannot run
        (``checked``: its preflight, where the caller already ran it)."""
        return cls(job, reporter, checked)

    def extend_prompts(self, n: int) -> int:
        """Make the first ``n`` prompts of the task available (prompt sets are prefix-stable:
        the first k of n prompts are the k prompts); returns how many there are (a prompt
        file may hold fewer)."""
        from .prompts import resolve_prompt_set

        n = min(n, MAX_PROMPTS)
        if n <= len(self.prompt_ids):
            return len(self.prompt_ids)
        try:
            ps = resolve_prompt_set(self.task, n, self.job.seed_effective)
        except (FileNotFoundError, ValueError) as exc:
            raise ConfigError(str(exc)) from None
        self.prompt_set = ps
        texts = ps.prompts()
        new = texts[len(self.prompt_ids):]
        if new:  # one batched call: the fast tokenizer encodes a list in one pass
            self.prompt_ids += [list(ids) for ids in self.tokenizer(new, add_special_tokens=True).input_ids]
        return len(self.prompt_ids)

    def elapsed(self) -> float:
        """Seconds since the session started loading."""
        return time.perf_counter() - self.started

    # -- engines --------------------------------------------------------------------
    def engine(self, cfg: RolloutConfig):
        """An engine for ``cfg``; hf engines perturb a copy of the loaded fp32 weights (no disk read)."""
        from .engines import build_engine

        base = copy.deepcopy(self.base_model) if cfg.engine == "hf" and self.base_model is not None else None
        kwargs = {}
        if cfg.engine == "vllm":
            width = max(len(p) for p in self.prompt_ids) if self.prompt_ids else 64
            limit = getattr(self.model_config, "max_position_embeddings", None) or 1 << 30
            kwargs["max_model_len"] = min(width + cfg.sampling.max_new_tokens + 8, int(limit))
        return build_engine(self.job.model, cfg, self.device, base_model=base, task=self.task,
                            cache_dir=getattr(self.job, "cache_dir", None), **kwargs)

    def check_rollout(self, cfg: RolloutConfig) -> None:
        """Refuse what ``cfg`` gets wrong about this model (used for configs a job derives,
        such as sensitivity's; the job's own config passed preflight)."""
        from .engines.hf import check_weight_blocks, resolve_targets
        from .engines.hf.staleness import stale_snapshot_path

        check_weight_blocks(resolve_targets(self.trainer.model, cfg), cfg)
        if cfg.engine == "hf" and cfg.staleness:
            stale_snapshot_path(self.job.model, cfg.staleness)

    def kv_layer_formats(self, cfg: RolloutConfig) -> list[str | None]:
        """The KV format of each layer under ``cfg`` (None: BF16), for the capacity report."""
        from .engines.hf import resolve_targets

        return resolve_targets(self.trainer.model, cfg).kv_formats

    # -- measuring ------------------------------------------------------------------
    def measure(self, cfg: RolloutConfig, label: str, frac: tuple[float, float] = (0.0, 1.0), keep: bool = False,
                engine=None, on_batch: Callable[[int, object], None] | None = None,
                start: int = 0, stop: int | None = None) -> Measurement:
        """``cfg``'s rollouts of prompts ``[start, stop)`` (sampling seeds follow each prompt's
        global index, so a range gives the same tokens as in any other layout)."""
        from .engines.base import logprob_temperature
        from .metrics import TokenRecords, full_vocab_terms
        from .prompts import PromptSet

        own = engine is None
        engine = engine or self.engine(cfg)
        stop = len(self.prompt_ids) if stop is None else stop
        temperature = logprob_temperature(cfg.sampling)
        try:
            bs = self.job.batch_size
            parts, texts, rollouts, scores = [], [], [], []
            t_sample = t_score = 0.0
            want_full = engine.name == "hf"
            for bi, lo in enumerate(range(start, stop, bs)):
                if self.reporter.should_stop():
                    raise Cancelled(f"cancelled while measuring {label}")
                hi = min(stop, lo + bs)
                batch = self.prompt_ids[lo:hi]
                t0 = time.perf_counter()
                r = engine.sample(batch, cfg.sampling, seed=cfg.seed, offset=lo, return_full=want_full)
                t1 = time.perf_counter()
                s = self.trainer.score(batch, r.tokens, r.mask, return_full=want_full, temperature=temperature)
                t2 = time.perf_counter()
                t_sample += t1 - t0
                t_score += t2 - t1
                kl = tv = None
                if want_full and r.full_logprobs is not None and s.full_logprobs is not None:
                    kl, tv = full_vocab_terms(r.full_logprobs, s.full_logprobs)
                    r.full_logprobs = None
                parts.append(TokenRecords.from_arrays(r.logprobs, s.logprobs, r.mask, lo, kl, tv))
                texts.extend(self.tokenizer.decode(resp, skip_special_tokens=True) for resp in r.responses())
                if keep:
                    rollouts.append(r)
                    scores.append(s)
                if on_batch is not None:
                    on_batch(bi, TokenRecords.concat(parts))
                done = (hi - start) / max(1, stop - start)
                self.reporter.progress(frac[0] + (frac[1] - frac[0]) * done, f"{label}: {hi}/{stop} prompts")
            records = TokenRecords.concat(parts)
            records.n_sequences = stop
            try:
                graded = PromptSet(self.prompt_set.name, self.prompt_set.problems[start:stop], self.prompt_set.extract).grade(texts)
                correct, accuracy = sum(graded), sum(graded) / max(1, len(graded))
            except Exception:  # noqa: BLE001 - grading is informative only
                correct, accuracy = None, None
            return Measurement(label, cfg, records, accuracy, t_sample, t_score, rollouts, scores, engine.info(),
                               correct=correct, graded=stop - start)
        finally:
            if own:
                engine.close()

    def reference_config(self, engine: str | None = None) -> RolloutConfig:
        """The BF16 unit's config: the session's unit engine unless ``engine`` names one."""
        if engine in (None, "auto"):
            engine = self.unit_engine
        return self.rollout.bf16_reference(engine)

    def floor_config(self, ref_cfg: RolloutConfig) -> RolloutConfig:
        """The unit under a second seed: the floor's measurement."""
        return ref_cfg.model_copy(update={"seed": (ref_cfg.seed + 1) % (MAX_SEED + 1)})

    # -- the BF16 reference, measured once --------------------------------------------
    def reference_key(self, cfg: RolloutConfig, start: int = 0, stop: int | None = None) -> str:
        """Everything a reference measurement depends on, by content: the prompts' token
        ids, the tokenizer's and the checkpoint's files, the sampling and engine config, the
        trainer, the library versions and the code version."""
        from .fingerprint import (MEASUREMENT_VERSION, checkpoint_digest, digest_of, library_versions,
                                  token_ids_digest, tokenizer_digest)

        stop = len(self.prompt_ids) if stop is None else stop
        model = Path(self.job.model)
        payload = {
            "model": str(model.resolve()) if model.exists() else self.job.model,
            "checkpoint": checkpoint_digest(model), "tokenizer": tokenizer_digest(model),
            "prompts": token_ids_digest(self.prompt_ids[start:stop]), "start": start, "task": self.task,
            "rollout": cfg.model_dump(mode="json"), "trainer_dtype": self.job.trainer_dtype,
            "batch_size": self.job.batch_size, "device": self.device.type,
            "versions": library_versions(cfg.engine), "code": MEASUREMENT_VERSION,
        }
        return digest_of(payload)

    def reference(self, cfg: RolloutConfig, frac: tuple[float, float] = (0.0, 1.0), on_batch=None,
                  start: int = 0, stop: int | None = None, engine=None) -> Measurement:
        """A BF16 measurement of prompts ``[start, stop)``, reused from memory or ``cache_dir``
        when everything it depends on is the same (:meth:`reference_key`)."""
        stop = len(self.prompt_ids) if stop is None else stop
        key = self.reference_key(cfg, start, stop)
        if key in _REFERENCE_MEMO:
            return dataclasses.replace(_REFERENCE_MEMO[key], cached=True)
        cache_dir = getattr(self.job, "cache_dir", None)
        path = Path(cache_dir) / f"bf16-reference-{key}.npz" if cache_dir else None
        if path is not None and path.is_file():
            m = _load_measurement(path, cfg)
        else:
            m = self.measure(cfg, "BF16 reference", frac, on_batch=on_batch, start=start, stop=stop,
                             engine=engine() if callable(engine) else engine)
            if path is not None:
                _save_measurement(path, m)
        _REFERENCE_MEMO[key] = m
        while len(_REFERENCE_MEMO) > _REFERENCE_MEMO_SIZE:
            _REFERENCE_MEMO.pop(next(iter(_REFERENCE_MEMO)))
        return m


_REFERENCE_MEMO: dict[str, Measurement] = {}
_REFERENCE_MEMO_SIZE = 32
_RECORD_FIELDS = ("lp_roll", "lp_train", "seq", "pos", "kl_full", "tv_full")


def _save_measurement(path: Path, m: Measurement) -> None:
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f: getattr(m.records, f) for f in _RECORD_FIELDS if getattr(m.records, f) is not None}
    meta = {"n_sequences": m.records.n_sequences, "accuracy": m.accuracy, "sample_seconds": m.sample_seconds,
            "score_seconds": m.score_seconds, "engine_info": m.engine_info, "correct": m.correct, "graded": m.graded}
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, meta=np.array(json.dumps(meta)), **arrays)
    tmp.replace(path)


def _load_measurement(path: Path, cfg: RolloutConfig) -> Measurement:
    import numpy as np

    from .metrics import TokenRecords

    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
        arrays = {f: (z[f] if f in z.files else None) for f in _RECORD_FIELDS}
    records = TokenRecords(**arrays, n_sequences=meta["n_sequences"])
    return Measurement("BF16 reference", cfg, records, meta["accuracy"], meta["sample_seconds"],
                       meta["score_seconds"], engine_info=meta["engine_info"], cached=True,
                       correct=meta.get("correct"), graded=meta.get("graded", 0))


def compare(session: MeasurementSession, m: Measurement, ref: Measurement, metric: str, n_boot: int,
            buckets: list[int] | None = None) -> dict:
    """The report body shared by every job: value, reference value, multiple and its CI."""
    from .metrics import finite_or_none, metric_values, multiple_with_ci, position_buckets, summarize

    summary, ref_summary = summarize(m.records), summarize(ref.records)
    values, ref_values = metric_values(summary), metric_values(ref_summary)
    n = max(m.records.n_sequences, ref.records.n_sequences)
    multiple, ci = multiple_with_ci(m.records, ref.records, metric, n, n_boot, seed=session.job.seed_effective)
    out = {
        "metric": metric,
        "value": values.get(metric),
        "reference_value": ref_values.get(metric),
        "multiple": finite_or_none(multiple),
        "multiple_ci": ci,
        "tokens": m.records.tokens,
        "reference_tokens": ref.records.tokens,
        "metrics": values,
        "reference_metrics": ref_values,
        "summary": summary,
        "reference_summary": ref_summary,
        "accuracy": m.accuracy,
        "reference_accuracy": ref.accuracy,
    }
    if buckets is not None:
        out["buckets"] = position_buckets(m.records, buckets)
    return out


# -- precision: the floor, the stop rule, the tail --------------------------------------

def relative_half_width(multiple: float | None, ci: list[float] | None) -> float | None:
    """The CI's half-width as a fraction of the multiple (None when either is missing)."""
    if multiple is None or ci is None or not multiple > 0 or not all(math.isfinite(c) for c in ci):
        return None
    return (ci[1] - ci[0]) / 2.0 / multiple


def stop_reason(rel_half_width: float | None, target: float, tokens: int, max_tokens: int,
                prompts: int, max_prompts: int) -> str | None:
    """Why sampling rounds stop now, or None to sample another round: the CI reached the
    target half-width (``precision``), the token budget is spent, or no prompts are left.
    A target of 0 means one round."""
    if target <= 0:
        return "one round (target_ci 0)"
    if rel_half_width is not None and rel_half_width <= target:
        return "precision"
    if tokens >= max_tokens:
        return "token budget"
    if prompts >= max_prompts:
        return "prompts exhausted"
    return None


def next_round_size(prompts: int, rel_half_width: float | None, target: float, first: int) -> int:
    """Prompts to add: the CI narrows as 1/sqrt(n), so about n((w/target)^2 - 1), at least
    the first round's size and at most three times what was measured."""
    if rel_half_width is None or target <= 0:
        return max(first, prompts)
    need = prompts * ((rel_half_width / target) ** 2 - 1.0)
    return int(min(max(need * 1.1, first), 3 * prompts))


def floor_from(a, b, metric: str, n: int, n_boot: int, seed: int) -> dict:
    """The unit's own spread: the multiple of the unit under a second seed (``b``) over the
    unit (``a``), and the floor: the 95th percentile of max(R, 1/R) over paired bootstrap
    resamples.  A multiple at or below the floor cannot be told apart from BF16."""
    import numpy as np

    from .metrics import finite_or_none, multiple_with_ci, per_sequence_sums

    value, ci = multiple_with_ci(b.records, a.records, metric, n, n_boot, seed=seed)
    s1, c1 = per_sequence_sums(b.records, metric, n)
    s0, c0 = per_sequence_sums(a.records, metric, n)
    floor = None
    if value is not None and value > 0 and n >= 2 and n_boot > 0:
        rng = np.random.default_rng(seed + 7)
        idx = rng.integers(0, n, size=(min(n_boot, max(1, 2_000_000 // n)), n))
        with np.errstate(divide="ignore", invalid="ignore"):
            r = (s1[idx].sum(1) / np.maximum(c1[idx].sum(1), 1)) / (s0[idx].sum(1) / np.maximum(c0[idx].sum(1), 1))
        r = r[np.isfinite(r) & (r > 0)]
        if r.size:
            floor = float(np.percentile(np.maximum(r, 1.0 / r), 95))
    elif value is not None and value > 0:
        floor = max(value, 1.0 / value)
    return {"value": finite_or_none(floor), "seed_multiple": finite_or_none(value), "seed_multiple_ci": ci,
            "seeds": [a.cfg.seed, b.cfg.seed]}


def top_share(records, metric: str, fraction: float = 0.01) -> float | None:
    """Share of the summed per-token metric carried by the top ``fraction`` of tokens."""
    import numpy as np

    from .metrics import token_terms

    v = token_terms(records).get(metric)
    if v is None or v.size == 0:
        return None
    v = np.abs(v)
    total = float(v.sum())
    if total <= 0:
        return None
    k = max(1, int(math.ceil(fraction * v.size)))
    return float(np.sort(v)[-k:].sum() / total)


def unit_block(session, name: str, ref: Measurement, floor: dict, m: Measurement, metric: str, n: int, n_boot: int,
               known: tuple | None = None) -> dict:
    """The multiple of ``m`` against one unit, with that unit's floor (``known``: the
    (reference value, multiple, CI) already computed for it)."""
    from .fingerprint import library_versions
    from .metrics import finite_or_none, metric_values, multiple_with_ci, summarize

    if known is None:
        value, ci = multiple_with_ci(m.records, ref.records, metric, n, n_boot, seed=session.job.seed_effective)
        known = (metric_values(summarize(ref.records)).get(metric), finite_or_none(value), ci)
    return {"engine": name, "dtype": "bf16", "versions": library_versions(name), "reference_value": known[0],
            "reference_tokens": ref.records.tokens, "multiple": known[1], "multiple_ci": known[2], "floor": floor}


def run_mismatch(cfg: MismatchJobConfig, reporter: Reporter | None = None, dump_path: str | Path | None = None,
                 checked=None) -> dict:
    """Admission measurement of ``cfg.rollout`` on ``cfg.model``; JSON-serialisable report
    (``checked``: the config's preflight, where the caller already ran it)."""
    from .capacity import kv_capacity
    from .engines.base import LOGPROB_TRANSFORM
    from .metrics import finite_or_none, json_safe, metric_values, multiple_with_ci, summarize

    session = MeasurementSession.open(cfg, reporter, checked)
    reporter, rollout = session.reporter, session.rollout
    metric, n_boot, seed = cfg.metric, cfg.bootstrap, cfg.seed_effective
    ref_cfg = session.reference_config()
    other_unit = ("hf" if session.unit_engine == "vllm" else "vllm") if cfg.compare_units else None
    if other_unit == "vllm":
        from .preflight import vllm_problems

        why = vllm_problems(rollout.bf16_reference("vllm"), session.model_config, cfg.device, "reference")
        if why:
            session.warnings.append("compare_units: no vllm unit here (" + "; ".join(why) + ")")
            other_unit = None
    engines: dict[str, object] = {}

    def engine_for(c: RolloutConfig):
        # one engine per config; the seed is per sampling call, so the floor's second seed shares the unit's engine
        key = json.dumps(c.model_dump(mode="json", exclude={"seed"}), sort_keys=True)
        if key not in engines:
            engines[key] = session.engine(c)
        return engines[key]

    def trace(label):
        def on_batch(bi, records):
            v = metric_values(summarize(records)).get(metric)
            if v is not None:
                reporter.log(bi, {f"mismatch/{label}_{metric}": v})
        return on_batch

    is_unit = rollout == ref_cfg
    keep = dump_path is not None
    ref = floor_m = m = None
    others: dict[str, tuple] = {}
    rounds, start, size = [], 0, cfg.prompts
    reason = None
    try:
        while reason is None:
            stop = session.extend_prompts(start + size)
            if stop <= start:
                reason = "prompts exhausted"
                break
            span = dict(start=start, stop=stop)
            lo = min(0.9, 0.9 * (1 - 0.5 ** len(rounds)))
            hi = min(0.95, 0.9 * (1 - 0.5 ** (len(rounds) + 1)))
            mid = lo + (hi - lo) / 3
            if is_unit and keep:
                r_ref = session.measure(ref_cfg, "BF16 unit", (lo, mid), keep=True, engine=engine_for(ref_cfg), **span)
            else:
                r_ref = session.reference(ref_cfg, (lo, mid), trace("reference"), engine=lambda: engine_for(ref_cfg), **span)
            fcfg = session.floor_config(ref_cfg)
            r_floor = session.reference(fcfg, (mid, mid + (hi - lo) / 3), engine=lambda: engine_for(fcfg), **span)
            r_m = r_ref if is_unit else session.measure(rollout, "rollout config", (mid + (hi - lo) / 3, hi), keep=keep,
                                                        engine=engine_for(rollout), on_batch=trace("rollout"), **span)
            ref = r_ref if ref is None else ref.extended(r_ref)
            floor_m = r_floor if floor_m is None else floor_m.extended(r_floor)
            m = (ref if is_unit else (r_m if m is None else m.extended(r_m)))
            for name in [other_unit] if other_unit else []:
                ocfg = rollout.bf16_reference(name)
                o_ref = session.reference(ocfg, engine=lambda: engine_for(ocfg), **span)
                o_fl = session.reference(session.floor_config(ocfg), engine=lambda: engine_for(session.floor_config(ocfg)), **span)
                prev = others.get(name)
                others[name] = (o_ref, o_fl) if prev is None else (prev[0].extended(o_ref), prev[1].extended(o_fl))
            value, ci = multiple_with_ci(m.records, ref.records, metric, stop, n_boot, seed=seed)
            rel = relative_half_width(finite_or_none(value), ci)
            rounds.append({"prompts": stop, "tokens": m.records.tokens, "multiple": finite_or_none(value),
                           "multiple_ci": ci, "relative_half_width": rel})
            reporter.log(len(rounds), {"mismatch/round_multiple": value} if value is not None and math.isfinite(value) else {})
            reason = stop_reason(rel, cfg.target_ci, m.records.tokens, cfg.max_tokens, stop, MAX_PROMPTS)
            if reason is None and stop < start + size:
                reason = "prompts exhausted"
            start, size = stop, next_round_size(stop, rel, cfg.target_ci, cfg.prompts)
    finally:
        for eng in engines.values():
            eng.close()

    n = max(m.records.n_sequences, ref.records.n_sequences)
    report = compare(session, m, ref, metric, n_boot, cfg.position_buckets)
    floor = floor_from(ref, floor_m, metric, n, n_boot, seed)
    units = {session.unit_engine: unit_block(session, session.unit_engine, ref, floor, m, metric, n, n_boot,
                                             (report["reference_value"], report["multiple"], report["multiple_ci"]))}
    unit_factor = None
    for name, (o_ref, o_fl) in others.items():
        units[name] = unit_block(session, name, o_ref, floor_from(o_ref, o_fl, metric, n, n_boot, seed), m, metric, n, n_boot)
        hf_ref, vllm_ref = (ref, o_ref) if session.unit_engine == "hf" else (o_ref, ref)
        f, f_ci = multiple_with_ci(vllm_ref.records, hf_ref.records, metric, n, n_boot, seed=seed)
        unit_factor = {"what": "vllm BF16 unit / hf BF16 unit (the hf multiple divided by this is the vllm multiple)",
                       "value": finite_or_none(f), "ci": f_ci}
    rel = relative_half_width(report["multiple"], report["multiple_ci"])
    share = top_share(m.records, metric)
    warnings = list(session.warnings)
    if rel is None or rel > cfg.target_ci > 0:
        width = "no CI" if rel is None else f"the 95% CI is ±{rel:.0%} of the multiple"
        warnings.append(f"precision: {width} after {m.records.tokens} tokens ({reason}), wider than the target "
                        f"±{cfg.target_ci:.0%}: too wide to decide; raise max_tokens or prompts")
    ci = report["multiple_ci"]
    if not is_unit and floor["value"] is not None and ci is not None and ci[0] <= floor["value"]:
        warnings.append(f"floor: the CI's lower end {ci[0]:.3g} is within the BF16 unit's own spread (floor "
                        f"{floor['value']:.3g}x): this multiple cannot be told apart from BF16")
    if report["reference_value"] is not None and abs(report["reference_value"]) < NEGLIGIBLE_REFERENCE:
        warnings.append(f"reference: the unit's {metric} is {report['reference_value']:.2g}, about zero, so the multiple "
                        "divides by almost nothing and means nothing")
    if share is not None and share > 0.5:
        warnings.append(f"tail: the top 1% of tokens carry {share:.0%} of {metric}; the multiple rests on a few tokens")
    report.update(
        model=cfg.model,
        task=session.task,
        prompts=n,
        seed=seed,
        rollout=rollout.model_dump(mode="json"),
        reference_rollout=ref_cfg.model_dump(mode="json"),
        unit={"engine": session.unit_engine, "dtype": "bf16", "why": session.unit_reason,
              "versions": units[session.unit_engine]["versions"]},
        floor=floor,
        units=units,
        unit_factor=unit_factor,
        identical_to_unit=is_unit,
        logprobs=LOGPROB_TRANSFORM,
        precision={"target_ci": cfg.target_ci, "max_tokens": cfg.max_tokens, "relative_half_width": rel,
                   "stopped": reason, "rounds": rounds, "top1pct_share": share},
        warnings=warnings,
        trainer_dtype=cfg.trainer_dtype,
        engine=m.engine_info,
        kv_cache=kv_capacity(session.model_config, session.kv_layer_formats(rollout)),
        reference_cached=ref.cached,
        timing={
            "sample_s": m.sample_seconds if not is_unit else 0.0,
            "score_s": m.score_seconds if not is_unit else 0.0,
            "reference_sample_s": ref.sample_seconds,
            "reference_score_s": ref.score_seconds,
            "total_s": session.elapsed(),
        },
    )
    if report["multiple"] is not None:
        reporter.log(n, {f"mismatch/{metric}": report["value"], "mismatch/multiple": report["multiple"]})
    if dump_path is not None:
        write_dump(dump_path, m)
    reporter.progress(1.0, "done")
    return json_safe(report)


def write_dump(path: str | Path, m: Measurement) -> int:
    """One JSON line per response: prompt and response token ids, both logprob lists."""
    lines = 0
    with open(path, "w") as fh:
        for r, s in zip(m.rollouts, m.trainer_scores):
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
