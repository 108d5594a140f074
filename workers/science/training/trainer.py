"""The on-policy training loop every method shares; a method adds its loss.

Each step t: the rollout engine holds the trainer's weights of step ``t - async_k`` (hf:
re-prepared from them, re-quantized and re-noised with a fresh seed; vllm: one engine for
the run, the weights pushed into it, :mod:`.vllm_rollout`), the student samples a batch
from it, the method scores it (OPD: the teacher's logprobs; GRPO: exact-match rewards),
the trainer copy (fp32 master weights) runs forward and backward and takes one AdamW
step with linear warm-up and gradient clipping.  All randomness is a function of
``(seed, step)`` (prompts, sampling uniforms, noise), so a fixed seed repeats a run bit
for bit on CPU and a resumed run continues the same trajectory.

Trace keys (``reporter.log(step, ...)`` after every update): ``train/loss``,
``train/reverse_kl`` (sampled-token estimate, trainer vs teacher, where there is one),
``train/reward`` (exact match of the sampled responses), ``train/lr``, ``train/grad_norm``,
``train/response_len``, ``train/staleness``, ``mismatch/k3`` (rollout engine vs trainer on
the sampled tokens) and ``mismatch/multiple`` (over the k3 of a BF16 engine of the rollout
engine's kind, measured at the start), ``is/weight_mean|weight_max|clip_fraction|ess`` (raw
ratios when no correction is on), ``is/masked_fraction``, ``perf/tokens_per_s``,
``time/rollout_s|teacher_s|update_s|step_s`` (``time/weight_sync_s``, part of the rollout time, with engine vllm)
and ``time/step_overlapped_s`` (modelled: with async_k >= 1 the rollout hides behind the
teacher and update passes).  ``eval/accuracy`` at step 0, every ``eval_every`` steps and at
the end (greedy, trainer copy, held-out prompts).
"""
from __future__ import annotations

import copy
import json
import logging
import math
import re
import shutil
import time
from pathlib import Path
from typing import Sequence

import torch

from .. import engines  # noqa: F401 - hides a broken torchvision before transformers loads
from ..config import ConfigError, RolloutConfig, SamplingConfig
from ..engines.base import SEED_MODULUS, Rollouts
from ..engines.hf import (
    HFEngine,
    check_model_path,
    check_weight_blocks,
    load_model,
    load_tokenizer,
    resolve_device,
    resolve_targets,
)
from ..engines.hf.sampling import left_pad, positions
from ..prompts import TASK_FILE, Problem, encode_prompts, model_task
from ..reporting import Cancelled, NullReporter, Reporter
from . import losses
from .config import TrainingConfig
from .recheck import AdmissionRecheck
from .results import TrainingResult
from .tasks import TrainingTask, training_task
from .vllm_rollout import SyncedVLLM

CHECKPOINT_PREFIX = "checkpoint-"
_CHECKPOINT_NAME = re.compile(rf"{CHECKPOINT_PREFIX}\d+")
log = logging.getLogger(__name__)

STATE_FILE = "trainer_state.pt"
STATE_JSON = "trainer_state.json"
#: Held-out problems are drawn with this seed whatever the run's seed, so seeds compare on one set.
#: Fields that may change when a run is resumed; any other difference is refused.
RESUMABLE_CHANGES = {"steps", "out", "resume", "resume_from", "device", "threads", "eval_every", "eval_prompts",
                     "checkpoint_every"}


def checkpoint_dir(out: str | Path, step: int) -> Path:
    return Path(out) / f"{CHECKPOINT_PREFIX}{step:06d}"


def last_checkpoint(out: str | Path) -> Path | None:
    """The newest committed checkpoint folder under ``out``: named ``checkpoint-STEP`` (a
    save cut short leaves ``checkpoint-STEP.tmp``, complete perhaps but committed never: the
    points before it may not be stored) and holding its trainer state."""
    found = [p for p in Path(out).iterdir() if _CHECKPOINT_NAME.fullmatch(p.name) and (p / STATE_FILE).is_file()]
    return max(found, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX):]), default=None)


def response_logprobs(model, prompt_ids: Sequence[Sequence[int]], tokens: torch.Tensor, mask: torch.Tensor,
                      pad_id: int, device: torch.device) -> torch.Tensor:
    """Log-distributions ``[B, L, V]`` of ``model`` at every response position, teacher-forced
    (the same layout as :meth:`HFEngine.score`), with gradient."""
    ids, attn = left_pad(prompt_ids, pad_id, device)
    p = ids.shape[1]
    resp = tokens.to(device)
    full_ids = torch.cat([ids, resp], dim=1)
    full_attn = torch.cat([attn, mask.to(device).long()], dim=1)
    out = model(input_ids=full_ids, attention_mask=full_attn, position_ids=positions(full_attn), use_cache=False)
    return torch.log_softmax(out.logits[:, p - 1 : p - 1 + resp.shape[1], :].float(), dim=-1)


class OnPolicyTrainer:
    """The shared loop.  Subclasses set :meth:`setup` (load what the method needs, check it)
    and :meth:`compute_loss`; ``group_size`` > 1 samples each prompt that many times."""

    method = "base"
    group_size = 1

    def __init__(self, config: TrainingConfig, reporter: Reporter | None = None) -> None:
        self.config = config
        self.reporter = reporter or NullReporter()
        if config.threads:
            torch.set_num_threads(config.threads)
        check_model_path(config.model)
        if config.rollout.engine == "vllm":
            _check_vllm(config)
        self.device = resolve_device(config.device)
        self.task, task_tokens = self._resolve_task()
        self.resume_path = self._resolve_resume()
        self.tokenizer = load_tokenizer(config.model)
        self.model = load_model(str(self.resume_path or config.model), self.device, torch.float32)
        self.pad_id = int(self.model.config.pad_token_id if self.model.config.pad_token_id is not None else 0)
        max_new = config.max_new_tokens or task_tokens or config.rollout.sampling.max_new_tokens
        self.sampling: SamplingConfig = config.rollout.sampling.model_copy(update={"max_new_tokens": max_new})
        check_weight_blocks(resolve_targets(self.model, config.rollout), config.rollout)
        self.setup()
        self.eval_set = self.task.eval_set(config.eval_prompts)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.lr, weight_decay=config.weight_decay)
        warm = config.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        self.step = 0
        self.versions: dict[int, dict[str, torch.Tensor]] = {}  # async: weights of the last k steps
        self.k3_reference: float | None = None
        self.evals: list[tuple[int, float]] = []
        self.totals = {"rollout_s": 0.0, "teacher_s": 0.0, "update_s": 0.0, "eval_s": 0.0, "step_overlapped_s": 0.0,
                       "tokens": 0}
        self.recheck = AdmissionRecheck(self) if config.budget else None
        self.vllm = SyncedVLLM(config.model) if config.rollout.engine == "vllm" else None
        if self.resume_path is not None:
            self._load_state(self.resume_path)
            log.info("resuming from %s at step %d", self.resume_path, self.step)

    # -- what a method provides -----------------------------------------------------------
    @property
    def lr(self) -> float:
        return self.config.lr

    def setup(self) -> None:
        """Load and check what the method needs (a teacher...); raise ConfigError before training."""

    def compute_loss(self, batch: dict) -> tuple[torch.Tensor, dict]:
        raise NotImplementedError

    def score_batch(self, batch: dict) -> None:
        """Add the method's signal to the batch (teacher logprobs, rewards): timed as 'teacher'."""

    # -- checks before anything runs ---------------------------------------------------------
    def _resolve_task(self) -> tuple[TrainingTask, int | None]:
        task, toy = self.config.task, model_task(self.config.model)
        if task == "auto":
            task = toy["task"] if toy else "arithmetic:3"
        return training_task(task), (toy or {}).get("max_new_tokens")

    def _resolve_resume(self) -> Path | None:
        rf, out = self.config.resume_from, self.config.out
        if rf is None:
            return last_checkpoint(out) if self.config.resume and out and Path(out).is_dir() else None
        p = Path(rf)
        if not p.is_dir():
            raise ConfigError(f"resume_from: checkpoint {rf!r} does not exist")
        if not (p / STATE_FILE).is_file() or not (p / "config.json").is_file():
            raise ConfigError(f"resume_from: {rf!r} is not a training checkpoint (no {STATE_FILE} or config.json)")
        return p

    # -- the loop ------------------------------------------------------------------------------
    def train(self) -> TrainingResult:
        try:
            return self._train()
        finally:
            self.close()

    def close(self) -> None:
        """Shut the run's vLLM engines down (hf engines live for one batch)."""
        if self.vllm is not None:
            self.vllm.close()

    def _train(self) -> TrainingResult:
        cfg = self.config
        if self.step == 0:
            if cfg.async_k:
                self.versions[0] = _state_copy(self.model)
            self.k3_reference = self._bf16_reference()
            self._evaluate(0)
        while self.step < cfg.steps:
            if self.reporter.should_stop():
                saved = self.save_checkpoint() if cfg.out else None
                raise Cancelled(f"stopped before step {self.step + 1}" + (f"; checkpoint {saved}" if saved else ""))
            self._train_step()
            self.reporter.progress(self.step / cfg.steps, f"{self.method} step {self.step}/{cfg.steps}")
            if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < cfg.steps:
                self._evaluate(self.step)
            if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 and self.step < cfg.steps:
                self.save_checkpoint()
        if not self.evals or self.evals[-1][0] != self.step:
            self._evaluate(self.step)
        final = self.save_checkpoint() if cfg.out else None
        return self._report(final)

    def _train_step(self) -> None:
        cfg, t = self.config, self.step
        t0 = time.perf_counter()
        problems = self.train_problems(t)
        version = max(0, t - cfg.async_k)
        synced_before = self.vllm.sync_s if self.vllm is not None else 0.0
        rollouts = self.rollout(problems, t, version)
        t1 = time.perf_counter()
        batch = {"problems": problems, "rollouts": rollouts, "mask": rollouts.mask, "lp_roll": rollouts.logprobs,
                 "rewards": self.rewards(problems, rollouts)}
        self.score_batch(batch)
        t2 = time.perf_counter()
        self.model.train()
        logp = response_logprobs(self.model, rollouts.prompt_ids, rollouts.tokens, rollouts.mask, self.pad_id,
                                 self.device)
        batch["logp_train"] = logp
        batch["lp_train"] = logp.gather(-1, rollouts.tokens.to(self.device)[..., None]).squeeze(-1).cpu()
        loss, stats = self.compute_loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip))
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.model.eval()
        self.step = t + 1
        if cfg.async_k:
            self.versions[self.step] = _state_copy(self.model)
            for old in [v for v in self.versions if v < self.step - cfg.async_k]:
                del self.versions[old]
        t3 = time.perf_counter()
        mask, lp_train, lp_roll = batch["mask"], batch["lp_train"].detach(), batch["lp_roll"]
        k3 = losses.k3(lp_train, lp_roll, mask)
        values = {
            "train/loss": float(loss.detach()), "train/lr": lr, "train/grad_norm": grad_norm,
            "train/reward": float(batch["rewards"].mean()),
            "train/response_len": float(mask.sum(-1).float().mean()),
            "train/staleness": float(t - version),
            "mismatch/k3": k3,
        }
        if self.k3_reference:
            values["mismatch/multiple"] = k3 / self.k3_reference
        if not any(key.startswith("is/weight") for key in stats):
            _, raw = losses.truncated_is_weights(lp_train, lp_roll, mask, cap=math.inf)
            stats = {**raw, **stats}
        values.update(stats)
        tokens = int(mask.sum())
        rollout_s, teacher_s, update_s = t1 - t0, t2 - t1, t3 - t2
        overlapped = max(rollout_s, teacher_s + update_s) if cfg.async_k else rollout_s + teacher_s + update_s
        values.update({"perf/tokens_per_s": tokens / max(rollout_s, 1e-9), "time/rollout_s": rollout_s,
                       "time/teacher_s": teacher_s, "time/update_s": update_s, "time/step_s": t3 - t0,
                       "time/step_overlapped_s": overlapped})
        if self.vllm is not None:
            values["time/weight_sync_s"] = self.vllm.sync_s - synced_before
        for key, v in (("rollout_s", rollout_s), ("teacher_s", teacher_s), ("update_s", update_s),
                       ("step_overlapped_s", overlapped), ("tokens", tokens)):
            self.totals[key] += v
        self.reporter.log(self.step, values)

    # -- pieces of a step -----------------------------------------------------------------------
    def train_problems(self, step: int) -> list[Problem]:
        """The step's training problems (train split, seeded by (seed, step)); each repeated
        ``group_size`` times in a row."""
        n = self.config.batch_size // self.group_size
        ps = self.task.train_set(n, seed=(self.config.seed * 1_000_003 + step) % SEED_MODULUS)
        return [p for p in ps.problems for _ in range(self.group_size)]

    def encode(self, problems: Sequence[Problem]) -> list[list[int]]:
        """Prompt token ids: a chat task's questions as a user turn in the model's template."""
        return encode_prompts(self.tokenizer, [p.prompt for p in problems], chat=self.task.chat)

    def rollout_config(self, step: int) -> RolloutConfig:
        """The rollout config of ``step``: with ``noise_draw`` "redrawn" a fresh noise seed per
        step (the engine re-noised from the new weights, as a real engine is re-synced); with
        "persistent" the same seed every step, so each tensor's noise is one fixed draw
        (relative to its RMS) for the whole run, as a quantizer's rounding is."""
        r = self.config.rollout
        seed = r.noise_seed if self.config.noise_draw == "persistent" else (r.noise_seed + 7919 * step) % SEED_MODULUS
        return r.model_copy(update={"noise_seed": seed, "sampling": self.sampling})

    def weights_of(self, version: int) -> torch.nn.Module:
        """An fp32 copy of the trainer at ``version`` (the current weights when it is current)."""
        model = copy.deepcopy(self.model)
        if version != self.step:
            model.load_state_dict(self.versions[version], strict=False)
        return model

    def state_of(self, version: int) -> dict[str, torch.Tensor]:
        """The trainer's weights at ``version`` by checkpoint name (the current ones when it is current)."""
        return self.model.state_dict() if version == self.step else self.versions[version]

    def rollout(self, problems: Sequence[Problem], step: int, version: int,
                cfg: RolloutConfig | None = None) -> Rollouts:
        cfg = cfg or self.rollout_config(step)
        seed = (self.config.seed * 1_000_003 + step) % SEED_MODULUS
        if cfg.engine == "vllm":
            assert self.vllm is not None, "a vllm rollout config starts the synced engine"
            synced = self.vllm.engine(cfg, version, lambda: self.state_of(version))
            return synced.sample(self.encode(problems), cfg.sampling, seed=seed)
        from ..engines import build_engine

        engine = build_engine(self.config.model, cfg, self.device, base_model=self.weights_of(version))
        try:
            return engine.sample(self.encode(problems), cfg.sampling, seed=seed)
        finally:
            engine.close()

    def decode(self, rollouts: Rollouts) -> list[str]:
        return [self.tokenizer.decode(r, skip_special_tokens=True) for r in rollouts.responses()]

    def rewards(self, problems: Sequence[Problem], rollouts: Rollouts) -> torch.Tensor:
        """Exact-match reward per sequence (1 correct, 0 not), graded by the task's own rule."""
        from ..prompts import PromptSet

        graded = PromptSet("batch", list(problems), self.eval_set.extract).grade(self.decode(rollouts))
        return torch.tensor(graded, dtype=torch.float32)

    def correction_weights(self, lp_train: torch.Tensor, lp_roll: torch.Tensor, mask: torch.Tensor, kind: str,
                           cap: float = 2.0, upper: float = 2.0, lower: float | None = None,
                           mode: str = "geometric") -> tuple[torch.Tensor | None, dict]:
        """Per-token weights of a rollout correction ('none', 'tis', 'mask') and their stats."""
        if kind == "tis":
            return losses.truncated_is_weights(lp_train, lp_roll, mask, cap)
        if kind == "mask":
            return losses.sequence_mask(lp_train, lp_roll, mask, upper, lower, mode)
        return None, {}

    def _bf16_reference(self) -> float | None:
        """k3 of a plain BF16 engine on the start weights against the trainer: the unit of
        ``mismatch/multiple`` (as the measurement's multiple)."""
        value = self.k3_against_trainer(self.bf16_config(), self.train_problems(0), 0)
        return value if value > 0 else None

    def bf16_config(self) -> RolloutConfig:
        """The unit of the multiple: a plain BF16 engine of the rollout engine's kind."""
        return RolloutConfig(engine=self.config.rollout.engine, dtype="bf16", sampling=self.sampling,
                             seed=self.config.rollout.seed)

    def k3_against_trainer(self, cfg: RolloutConfig, problems: Sequence[Problem], step: int) -> float:
        """k3 of an engine built from ``cfg`` on the current weights, sampling ``problems``
        with the seed of ``step``, against the trainer on the same tokens."""
        sums, counts = self.k3_sums_against_trainer(cfg, problems, step)
        return float(sums.sum() / counts.sum()) if counts.sum() > 0 else 0.0

    def k3_sums_against_trainer(self, cfg: RolloutConfig, problems: Sequence[Problem], step: int):
        """As :meth:`k3_against_trainer`, per sequence: each one's k3 sum and token count."""
        r = self.rollout(problems, step, self.step, cfg)
        with torch.no_grad():
            logp = response_logprobs(self.model, r.prompt_ids, r.tokens, r.mask, self.pad_id, self.device)
        lp = logp.gather(-1, r.tokens.to(self.device)[..., None]).squeeze(-1).cpu()
        return losses.k3_sequence_sums(lp, r.logprobs, r.mask)

    def _evaluate(self, step: int) -> float:
        t0 = time.perf_counter()
        engine = HFEngine(self.config.model, RolloutConfig(dtype="fp32"), self.device,
                          base_model=copy.deepcopy(self.model))
        greedy = SamplingConfig(temperature=0.0, max_new_tokens=self.sampling.max_new_tokens)
        prompts = self.encode(self.eval_set.problems)
        texts: list[str] = []
        for i in range(0, len(prompts), 256):
            texts.extend(self.decode(engine.sample(prompts[i : i + 256], greedy, seed=0, offset=i)))
        engine.close()
        acc = self.eval_set.accuracy(texts)
        self.evals.append((step, acc))
        self.totals["eval_s"] += time.perf_counter() - t0
        self.reporter.log(step, {"eval/accuracy": acc})
        if self.recheck is not None:
            self.recheck.check(step)
        return acc

    # -- checkpoints ------------------------------------------------------------------------------
    def save_checkpoint(self) -> str:
        """``out/checkpoint-STEP/``: an ordinary Hugging Face folder (config, safetensors,
        tokenizer, task file) plus ``trainer_state.pt`` (optimizer, scheduler, async weight
        versions, RNG, evals) for exact resume.  Written to a temporary name, then renamed,
        so a worker killed mid-save never leaves a half checkpoint that looks complete.  The
        points logged so far are made durable before the rename: a run resumed from this
        checkpoint logs only the steps after it."""
        assert self.config.out is not None, "checkpoints need out"
        final = checkpoint_dir(self.config.out, self.step)
        if (final / STATE_FILE).is_file():
            return str(final)
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.model.save_pretrained(tmp, safe_serialization=True)
        self.tokenizer.save_pretrained(tmp)
        task = Path(self.config.model) / TASK_FILE
        if task.is_file():
            shutil.copy(task, tmp / TASK_FILE)
        torch.save({
            "step": self.step, "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
            "versions": self.versions, "rng": torch.get_rng_state(), "k3_reference": self.k3_reference,
            "evals": self.evals, "totals": self.totals, "config": self.config.model_dump(mode="json"),
        }, tmp / STATE_FILE)
        (tmp / STATE_JSON).write_text(json.dumps({"step": self.step, "method": self.method, "evals": self.evals,
                                                  "config": self.config.model_dump(mode="json")}, indent=2))
        self.reporter.flush()
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return str(final)

    def _load_state(self, path: Path) -> None:
        state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True)
        saved, now = state["config"], self.config.model_dump(mode="json")
        changed = sorted(k for k in set(saved) | set(now) if k not in RESUMABLE_CHANGES and saved.get(k) != now.get(k))
        if changed:
            raise ConfigError(f"resume_from: the checkpoint {str(path)!r} was trained with a different config "
                              f"({', '.join(changed)}); only {', '.join(sorted(RESUMABLE_CHANGES))} may change "
                              "on resume")
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.versions = state["versions"]
        torch.set_rng_state(state["rng"])
        self.k3_reference = state["k3_reference"]
        self.evals = [tuple(e) for e in state["evals"]]
        self.totals = state["totals"]
        self.step = state["step"]

    def _report(self, checkpoint: str | None) -> TrainingResult:
        start = self.evals[0][1] if self.evals and self.evals[0][0] == 0 else None
        return TrainingResult.model_validate({
            "method": self.method, "model": self.config.model, "task": self.task.name,
            "steps": self.step, "start_accuracy": start, "final_accuracy": self.evals[-1][1] if self.evals else None,
            "evals": [{"step": s, "accuracy": a} for s, a in self.evals], "checkpoint": checkpoint,
            "k3_reference": self.k3_reference, "time": {k: v for k, v in self.totals.items() if k != "tokens"},
            "tokens": self.totals["tokens"], "async_k": self.config.async_k,
            "admission": self.recheck.report() if self.recheck is not None else None,
        })


def _check_vllm(config: TrainingConfig) -> None:
    """Refuse, before any weights load, what the vllm engine cannot run here: one line per problem."""
    from transformers import AutoConfig

    from ..preflight import PreflightError, vllm_problems

    problems = vllm_problems(config.rollout, AutoConfig.from_pretrained(config.model), config.device, "rollout")
    if problems:
        raise PreflightError(problems)


def _state_copy(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
