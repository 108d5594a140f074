"""A measurement session: a model's prompts, tokenizer and full-precision trainer, loaded
once, and the rollouts of any number of engine configs on them, scored by the trainer.

The rollout engine samples the student's responses; the trainer (the same checkpoint at
full precision) scores exactly those tokens, both under the same logprob transform
(:data:`~.engines.base.LOGPROB_TRANSFORM`).  The BF16 reference measurement is reused
from :mod:`.reference_cache` when everything it depends on is the same.
"""
from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from . import reference_cache
from .config import MAX_PROMPTS, MAX_SEED, ConfigError, RolloutConfig, _JobConfig
from .reporting import Cancelled, NullReporter, Reporter

if TYPE_CHECKING:
    from .prompts import PromptSet


@dataclass
class Measurement:
    """One engine's rollouts on a range of the session's prompts, scored by the trainer."""

    label: str
    cfg: RolloutConfig
    records: Any  # metrics.TokenRecords
    accuracy: float | None
    sample_seconds: float
    score_seconds: float
    rollouts: list = field(default_factory=list)  # kept only when asked (drift, dumps)
    trainer_scores: list = field(default_factory=list)
    engine_info: dict = field(default_factory=dict)
    cached: bool = False
    correct: int | None = None  # graded responses that were right
    graded: int = 0

    @classmethod
    def from_stored(cls, cfg: RolloutConfig, records: Any, scalars: dict) -> "Measurement":
        """A BF16 reference read back from :mod:`.reference_cache`."""
        return cls("BF16 reference", cfg, records, scalars["accuracy"], scalars["sample_seconds"],
                   scalars["score_seconds"], engine_info=scalars["engine_info"], cached=True,
                   correct=scalars.get("correct"), graded=scalars.get("graded", 0))

    def stored_scalars(self) -> dict:
        """What :mod:`.reference_cache` stores beside the token records."""
        return {"accuracy": self.accuracy, "sample_seconds": self.sample_seconds, "score_seconds": self.score_seconds,
                "engine_info": self.engine_info, "correct": self.correct, "graded": self.graded}

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
        self.prompt_set: PromptSet | None = None
        self.extend_prompts(job.prompts)
        self.trainer_dtype = checked.trainer_dtype  # the unit pair's trainer half, resolved by the preflight
        self.trainer = HFEngine.trainer(job.model, self.trainer_dtype, self.device)
        self.model_config = self.trainer.model.config
        self.base_model = self.trainer.model if self.trainer_dtype == "fp32" else None
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
        from .prompts import encode_prompts, resolve_prompt_set

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
            self.prompt_ids += encode_prompts(self.tokenizer, new, ps.chat)
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
        from .metrics import TokenRecords

        own = engine is None
        engine = engine or self.engine(cfg)
        stop = len(self.prompt_ids) if stop is None else stop
        try:
            parts: list[Any] = []
            texts: list[str] = []
            rollouts: list[Any] = []
            scores: list[Any] = []
            t_sample = t_score = 0.0
            for bi, lo in enumerate(range(start, stop, self.job.batch_size)):
                if self.reporter.should_stop():
                    raise Cancelled(f"cancelled while measuring {label}")
                hi = min(stop, lo + self.job.batch_size)

                def decoded(t: int, steps: int, lo=lo, hi=hi) -> None:  # progress within a long batch
                    if self.reporter.should_stop():  # a cancel is honoured at the next token, not the next batch
                        raise Cancelled(f"cancelled while measuring {label} (prompts {lo + 1}-{hi}, token {t})")
                    done = (lo - start + (hi - lo) * t / max(1, steps)) / max(1, stop - start)
                    self.reporter.progress(frac[0] + (frac[1] - frac[0]) * done,
                                           f"{label}: prompts {lo + 1}-{hi} of {stop}, token {t}/{steps}")

                r, s, records, seconds = self._scored_batch(engine, cfg, lo, hi, decoded)
                t_sample, t_score = t_sample + seconds[0], t_score + seconds[1]
                parts.append(records)
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
            correct, accuracy = self._graded(texts, start, stop)
            return Measurement(label, cfg, records, accuracy, t_sample, t_score, rollouts, scores, engine.info(),
                               correct=correct, graded=stop - start)
        finally:
            if own:
                engine.close()

    def _scored_batch(self, engine: Any, cfg: RolloutConfig, lo: int, hi: int,
                      on_step: Callable[[int, int], None] | None = None) -> tuple[Any, Any, Any, tuple[float, float]]:
        """Prompts ``[lo, hi)`` sampled by ``engine`` and scored by the trainer: the rollouts,
        the scores, their token records and the (sampling, scoring) seconds."""
        from .engines.base import logprob_temperature
        from .metrics import TokenRecords, full_vocab_terms

        batch = self.prompt_ids[lo:hi]
        want_full = engine.name == "hf"
        t0 = time.perf_counter()
        r = engine.sample(batch, cfg.sampling, seed=cfg.seed, offset=lo, return_full=want_full, on_step=on_step,
                          coupling=getattr(self.job, "coupling", "inverse_cdf"))
        t1 = time.perf_counter()
        s = self.trainer.score(batch, r.tokens, r.mask, return_full=want_full,
                               temperature=logprob_temperature(cfg.sampling))
        t2 = time.perf_counter()
        kl = tv = None
        if want_full and r.full_logprobs is not None and s.full_logprobs is not None:
            kl, tv = full_vocab_terms(r.full_logprobs, s.full_logprobs)
            r.full_logprobs = None
        return r, s, TokenRecords.from_arrays(r.logprobs, s.logprobs, r.mask, lo, kl, tv), (t1 - t0, t2 - t1)

    def _graded(self, texts: list[str], start: int, stop: int) -> tuple[int | None, float | None]:
        """How many of the responses to prompts ``[start, stop)`` are right, and the accuracy
        (None, None where the task cannot grade them: grading is informative only)."""
        from .prompts import PromptSet

        try:
            ps = self.prompt_set
            assert ps is not None
            graded = PromptSet(ps.name, ps.problems[start:stop], ps.extract).grade(texts)
            return sum(graded), sum(graded) / max(1, len(graded))
        except Exception:  # noqa: BLE001 - grading is informative only
            return None, None

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
        from .fingerprint import (
            MEASUREMENT_VERSION,
            checkpoint_digest,
            digest_of,
            library_versions,
            token_ids_digest,
            tokenizer_digest,
        )

        stop = len(self.prompt_ids) if stop is None else stop
        model = Path(self.job.model)
        payload = {
            "model": str(model.resolve()) if model.exists() else self.job.model,
            "checkpoint": checkpoint_digest(model), "tokenizer": tokenizer_digest(model),
            "prompts": token_ids_digest(self.prompt_ids[start:stop]), "start": start, "task": self.task,
            "rollout": cfg.model_dump(mode="json"), "trainer_dtype": self.trainer_dtype,
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
        known = reference_cache.remembered(key)
        if known is not None:
            return dataclasses.replace(known, cached=True)
        cache_dir = getattr(self.job, "cache_dir", None)
        on_disk = reference_cache.stored(key, cache_dir)
        if on_disk is not None:
            m = Measurement.from_stored(cfg, *on_disk)
        else:
            m = self.measure(cfg, "BF16 reference", frac, on_batch=on_batch, start=start, stop=stop,
                             engine=engine() if callable(engine) else engine)
            reference_cache.store(key, cache_dir, m.records, m.stored_scalars())
        reference_cache.remember(key, m)
        return m
