"""The admission measurement: a rollout config's mismatch as a multiple of BF16's.

The rollout engine samples the student's responses; the trainer (the same checkpoint at
full precision) scores exactly those tokens; every metric of :mod:`.metrics` is computed
over response tokens.  The BF16 reference engine does the same on the same prompts and
seeds, and the **multiple** is the primary metric (default k3) over the reference's, with a
paired bootstrap CI over prompts.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .config import ConfigError, MismatchJobConfig, RolloutConfig, _JobConfig
from .reporting import Cancelled, NullReporter, Reporter


@dataclass
class Measurement:
    """One engine's rollouts on the session's prompts, scored by the trainer."""

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


class MeasurementSession:
    """Prompts, tokenizer and the trainer reference, loaded once for many measurements."""

    def __init__(self, job: _JobConfig, reporter: Reporter | None = None) -> None:
        import torch

        from . import engines  # noqa: F401 - hides a broken torchvision before transformers loads
        from .engines.hf import HFEngine, check_model_path, load_tokenizer, resolve_device
        from .prompts import resolve_prompt_set
        from .toy import model_task

        self.started = time.perf_counter()
        self.job = job
        self.reporter = reporter or NullReporter()
        if job.threads:
            torch.set_num_threads(job.threads)
        check_model_path(job.model)
        self.device = resolve_device(job.device)
        task = job.task
        toy_task = model_task(job.model)
        if task == "auto":
            task = toy_task["task"] if toy_task else "arithmetic:3"
        self.task = task
        try:
            self.prompt_set = resolve_prompt_set(task, job.prompts, job.seed)
        except (FileNotFoundError, ValueError) as exc:
            raise ConfigError(str(exc)) from None
        self.tokenizer = load_tokenizer(job.model)
        self.prompt_ids = [self.tokenizer(p, add_special_tokens=True).input_ids for p in self.prompt_set.prompts()]
        self.trainer = HFEngine.trainer(job.model, job.trainer_dtype, self.device)
        self.model_config = self.trainer.model.config
        self.base_model = self.trainer.model if job.trainer_dtype == "fp32" else None
        self.rollout = job.rollout_effective

    @classmethod
    def open(cls, job: _JobConfig, reporter: Reporter | None = None) -> "MeasurementSession":
        """A session for ``job`` whose rollout config has passed :meth:`check_rollout`: how
        every job starts, so a bad config fails before anything is sampled."""
        session = cls(job, reporter)
        session.check_rollout(session.rollout)
        return session

    def elapsed(self) -> float:
        """Seconds since the session started loading."""
        return time.perf_counter() - self.started

    # -- engines --------------------------------------------------------------------
    def engine(self, cfg: RolloutConfig):
        """An engine for ``cfg``; hf engines perturb a copy of the loaded fp32 weights (no disk read)."""
        from .engines import build_engine

        base = copy.deepcopy(self.base_model) if cfg.engine == "hf" and self.base_model is not None else None
        return build_engine(self.job.model, cfg, self.device, base_model=base)

    def check_rollout(self, cfg: RolloutConfig) -> None:
        """Refuse, before any sampling, what ``cfg`` gets wrong about this model: a
        ``keep_bf16`` entry that is out of range or matches nothing, a ``block_size`` that
        does not tile a weight it quantizes, and (hf engine) missing or too few weight
        snapshots for its staleness.  vLLM's own refusals come when its engine is built."""
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
                engine=None, on_batch: Callable[[int, object], None] | None = None) -> Measurement:
        from .metrics import TokenRecords, full_vocab_terms

        own = engine is None
        engine = engine or self.engine(cfg)
        try:
            bs = self.job.batch_size
            n = len(self.prompt_ids)
            parts, texts, rollouts, scores = [], [], [], []
            t_sample = t_score = 0.0
            want_full = engine.name == "hf"
            for bi, start in enumerate(range(0, n, bs)):
                if self.reporter.should_stop():
                    raise Cancelled(f"cancelled while measuring {label}")
                batch = self.prompt_ids[start : start + bs]
                t0 = time.perf_counter()
                r = engine.sample(batch, cfg.sampling, seed=cfg.seed, offset=start, return_full=want_full)
                t1 = time.perf_counter()
                s = self.trainer.score(batch, r.tokens, r.mask, return_full=want_full)
                t2 = time.perf_counter()
                t_sample += t1 - t0
                t_score += t2 - t1
                kl = tv = None
                if want_full and r.full_logprobs is not None and s.full_logprobs is not None:
                    kl, tv = full_vocab_terms(r.full_logprobs, s.full_logprobs)
                    r.full_logprobs = None
                parts.append(TokenRecords.from_arrays(r.logprobs, s.logprobs, r.mask, start, kl, tv))
                texts.extend(self.tokenizer.decode(resp, skip_special_tokens=True) for resp in r.responses())
                if keep:
                    rollouts.append(r)
                    scores.append(s)
                if on_batch is not None:
                    on_batch(bi, TokenRecords.concat(parts))
                done = min(n, start + bs) / n
                self.reporter.progress(frac[0] + (frac[1] - frac[0]) * done, f"{label}: {min(n, start + bs)}/{n} prompts")
            records = TokenRecords.concat(parts)
            records.n_sequences = n
            try:
                accuracy = self.prompt_set.accuracy(texts)
            except Exception:  # noqa: BLE001 - grading is informative only
                accuracy = None
            return Measurement(label, cfg, records, accuracy, t_sample, t_score, rollouts, scores, engine.info())
        finally:
            if own:
                engine.close()

    def reference_config(self, engine: str | None = None) -> RolloutConfig:
        return self.rollout.bf16_reference(engine)

    # -- the BF16 reference, measured once --------------------------------------------
    def reference_key(self, cfg: RolloutConfig) -> str:
        """Everything the reference measurement depends on, including the checkpoint files."""
        model = Path(self.job.model)
        stamp = []
        if model.is_dir():
            for f in sorted(list(model.glob("*.safetensors")) + list(model.glob("*.bin")) + [model / "config.json"]):
                st = f.stat()
                stamp.append((f.name, st.st_size, st.st_mtime_ns))
        payload = {
            "model": str(model.resolve()) if model.exists() else self.job.model, "files": stamp, "task": self.task,
            "prompts": len(self.prompt_ids), "seed": self.job.seed, "rollout": cfg.model_dump(mode="json"),
            "trainer_dtype": self.job.trainer_dtype, "batch_size": self.job.batch_size, "device": self.device.type,
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]

    def reference(self, cfg: RolloutConfig, frac: tuple[float, float] = (0.0, 1.0), on_batch=None) -> Measurement:
        """The BF16 reference measurement, reused from memory or ``cache_dir`` when the model,
        prompts, seeds and sampling are the same: it is identical for every config."""
        key = self.reference_key(cfg)
        if key in _REFERENCE_MEMO:
            return dataclasses.replace(_REFERENCE_MEMO[key], cached=True)
        cache_dir = getattr(self.job, "cache_dir", None)
        path = Path(cache_dir) / f"bf16-reference-{key}.npz" if cache_dir else None
        if path is not None and path.is_file():
            m = _load_measurement(path, cfg)
        else:
            m = self.measure(cfg, "BF16 reference", frac, on_batch=on_batch)
            if path is not None:
                _save_measurement(path, m)
        _REFERENCE_MEMO[key] = m
        while len(_REFERENCE_MEMO) > _REFERENCE_MEMO_SIZE:
            _REFERENCE_MEMO.pop(next(iter(_REFERENCE_MEMO)))
        return m


_REFERENCE_MEMO: dict[str, Measurement] = {}
_REFERENCE_MEMO_SIZE = 8
_RECORD_FIELDS = ("lp_roll", "lp_train", "seq", "pos", "kl_full", "tv_full")


def _save_measurement(path: Path, m: Measurement) -> None:
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f: getattr(m.records, f) for f in _RECORD_FIELDS if getattr(m.records, f) is not None}
    meta = {"n_sequences": m.records.n_sequences, "accuracy": m.accuracy, "sample_seconds": m.sample_seconds,
            "score_seconds": m.score_seconds, "engine_info": m.engine_info}
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
                       meta["score_seconds"], engine_info=meta["engine_info"], cached=True)


def compare(session: MeasurementSession, m: Measurement, ref: Measurement, metric: str, n_boot: int,
            buckets: list[int] | None = None) -> dict:
    """The report body shared by every job: value, reference value, multiple and its CI."""
    from .metrics import finite_or_none, metric_values, multiple_with_ci, position_buckets, summarize

    summary, ref_summary = summarize(m.records), summarize(ref.records)
    values, ref_values = metric_values(summary), metric_values(ref_summary)
    n = len(session.prompt_ids)
    multiple, ci = multiple_with_ci(m.records, ref.records, metric, n, n_boot, seed=session.job.seed)
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


def run_mismatch(cfg: MismatchJobConfig, reporter: Reporter | None = None, dump_path: str | Path | None = None) -> dict:
    """Admission measurement of ``cfg.rollout`` on ``cfg.model``; JSON-serialisable report."""
    from .capacity import kv_capacity
    from .metrics import json_safe

    session = MeasurementSession.open(cfg, reporter)
    reporter, rollout = session.reporter, session.rollout
    ref_cfg = session.reference_config(cfg.reference_engine)
    metric = cfg.metric

    def trace(label):
        def on_batch(bi, records):
            from .metrics import metric_values, summarize

            v = metric_values(summarize(records)).get(metric)
            if v is not None:
                reporter.log(bi, {f"mismatch/{label}_{metric}": v})
        return on_batch

    if rollout == ref_cfg and dump_path is not None:
        ref = session.measure(ref_cfg, "BF16 reference", (0.0, 0.45), keep=True, on_batch=trace("reference"))
    else:
        ref = session.reference(ref_cfg, (0.0, 0.45), on_batch=trace("reference"))
    if rollout == ref_cfg:
        m = ref
    else:
        m = session.measure(rollout, "rollout config", (0.45, 0.95), keep=dump_path is not None, on_batch=trace("rollout"))
    report = compare(session, m, ref, metric, cfg.bootstrap, cfg.position_buckets)
    report.update(
        model=cfg.model,
        task=session.task,
        prompts=len(session.prompt_ids),
        seed=cfg.seed,
        rollout=rollout.model_dump(mode="json"),
        reference_rollout=ref_cfg.model_dump(mode="json"),
        trainer_dtype=cfg.trainer_dtype,
        engine=m.engine_info,
        kv_cache=kv_capacity(session.model_config, session.kv_layer_formats(rollout)),
        reference_cached=ref.cached,
        timing={
            "sample_s": m.sample_seconds if m is not ref else 0.0,
            "score_s": m.score_seconds if m is not ref else 0.0,
            "reference_sample_s": ref.sample_seconds,
            "reference_score_s": ref.score_seconds,
            "total_s": session.elapsed(),
        },
    )
    if report["multiple"] is not None:
        reporter.log(len(session.prompt_ids), {f"mismatch/{metric}": report["value"], "mismatch/multiple": report["multiple"]})
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
