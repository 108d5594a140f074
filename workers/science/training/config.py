"""One config per training method (as TRL has ``GKDConfig``), and the ``train`` job's config.

Torch-free: the web process imports it to validate configs.  ``TrainingConfig`` holds what
every method shares (models, rollout engine, optimiser, schedule of evals and
checkpoints); ``OPDConfig`` and ``GRPOConfig`` add their method's fields.  The ``train``
job kind takes :class:`TrainJobConfig`: the shared fields, a ``method`` and the fields of
every method, checked by the method's own config (:meth:`TrainJobConfig.method_config`),
so a field is declared and validated in exactly one place.
"""
from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import Field, ValidationError, model_validator

from ..config import MAX_NEW_TOKENS, MAX_SEED, ComputeDtype, ConfigError, RolloutConfig, _Strict

Method = Literal["opd", "grpo"]
OPDLoss = Literal["full", "topk", "sampled"]
Correction = Literal["none", "tis", "mask"]
NoiseDraw = Literal["redrawn", "persistent"]


class BudgetAtStep(_Strict):
    """A mismatch budget calibrated at a checkpoint of this training (its step)."""

    step: int = Field(0, ge=0, le=1_000_000_000)
    multiple: float = Field(..., gt=0.0, le=1e12)


class TrainingConfig(_Strict):
    """What every training method shares."""

    model: str = Field(..., min_length=1, max_length=1000, json_schema_extra={"sandbox": "model"},
                       description="The student checkpoint to train (a Hugging Face folder).")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig,
                                   description="The rollout engine the student samples from; its weights follow the "
                                               "trainer's after every update.")
    task: str = Field("auto", max_length=100, description="'auto' (the task the model dir names, else arithmetic:3), "
                                                          "'arithmetic:LEVEL' or 'gsm8k'; training prompts come from "
                                                          "the train split, eval prompts from the held-out split.")
    steps: int = Field(50, ge=1, le=1_000_000, description="Optimizer steps (the total, also when resuming).")
    batch_size: int = Field(64, ge=1, le=65_536, description="Sampled sequences per step.")
    lr: float = Field(3e-4, gt=0.0, le=1.0, description="AdamW peak learning rate (every OPD loss learned at 3e-4 "
                                                        "on the demo toy pair; README, benchmarks).")
    warmup_steps: int = Field(5, ge=0, le=1_000_000, description="Linear warm-up from lr/warmup_steps to lr, then "
                                                                 "constant.")
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="AdamW weight decay.")
    grad_clip: float = Field(1.0, gt=0.0, le=1e6, description="Clip the global gradient norm to this value.")
    max_new_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS, description="Response length; default: the toy "
                                                                                  "task's, else rollout.sampling.")
    async_k: int = Field(0, ge=0, le=64, description="Rollouts of step t come from the weights of step t-k (0: "
                                                     "synchronous).")
    noise_draw: NoiseDraw = Field("redrawn", description="Rollout weight noise (rollout.noise_sigma): 'redrawn' from a "
                                                         "fresh seed every step (zero-mean over a run), or "
                                                         "'persistent', one draw for the whole run (a fixed bias, as "
                                                         "quantization is).")
    eval_every: int = Field(10, ge=0, le=1_000_000, description="Greedy held-out accuracy of the trainer copy every "
                                                                "N steps (0: only at start and end).")
    eval_prompts: int = Field(200, ge=1, le=65_536, description="Held-out prompts per evaluation.")
    checkpoint_every: int = Field(0, ge=0, le=1_000_000, description="Save a checkpoint every N steps (0: only at "
                                                                     "the end and on cancel); needs out.")
    out: str | None = Field(None, max_length=1000, json_schema_extra={"sandbox": "product"},
                            description="Directory for checkpoints (checkpoint-STEP/ folders); set by the product "
                                        "for jobs.")
    resume: bool = Field(True, description="Continue from the newest checkpoint in out when there is one (a job "
                                           "restarted after a worker loss continues); none there, or no out: start "
                                           "fresh.")
    resume_from: str | None = Field(None, max_length=1000, json_schema_extra={"sandbox": "model"},
                                    description="A checkpoint folder (checkpoint-STEP/) to continue from; overrides "
                                                "resume.")
    budget: list[BudgetAtStep] = Field(default_factory=list, max_length=1000,
                                       description="Budgets calibrated at checkpoints of this run: at every "
                                                   "evaluation the rollout config's multiple is re-measured at the "
                                                   "current weights and judged against the budget of that step "
                                                   "(interpolated between checkpoints).")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seeds prompts, sampling and per-step noise: a fixed seed "
                                                        "repeats a run bit for bit on CPU.")
    trainer_dtype: ComputeDtype = Field("fp32", description="Master weights of the trainer copy (fp32 only for now).")
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$")
    threads: int | None = Field(None, ge=1, le=512)

    @model_validator(mode="after")
    def _shared_rules(self) -> "TrainingConfig":
        if self.rollout.staleness:
            raise ValueError("rollout.staleness reads a model's snapshot ring; "
                             "in training use async_k for stale rollouts")
        if self.trainer_dtype != "fp32":
            raise ValueError("trainer_dtype: only fp32 master weights are supported for now")
        return self


class _OPDFields(_Strict):
    teacher: str | None = Field(None, min_length=1, max_length=1000, json_schema_extra={"sandbox": "model"},
                                description="The teacher checkpoint (OPD); it must share the student's tokenizer.")
    loss: OPDLoss = Field("full", description="OPD loss: 'full' reverse KL over the vocabulary, 'topk' over the "
                                              "teacher's top-k, 'sampled' token advantage log pT - log pS.")
    top_k: int = Field(8, ge=1, le=1_000_000, description="k of the 'topk' loss.")
    normalize_advantages: bool = Field(True, description="'sampled' loss: normalise advantages per batch (mean 0, "
                                                         "std 1).")
    correction: Correction = Field("none", description="Rollout correction from the engine's own logprobs: 'tis' "
                                                       "token-level truncated IS at is_cap, 'mask' sequence-level "
                                                       "rejection.")
    is_cap: float = Field(2.0, gt=0.0, le=1e6, description="C of token TIS (verl's rollout_is_threshold).")
    mask_upper: float = Field(2.0, gt=1.0, le=1e6, description="'mask': drop a sequence whose IS ratio exceeds this "
                                                               "(verl rollout_rs threshold).")
    mask_lower: float | None = Field(None, gt=0.0, lt=1.0, description="'mask': drop a sequence whose IS ratio is "
                                                                       "below this; default 1/mask_upper.")
    mask_mode: Literal["geometric", "sequence"] = Field("geometric", description="'mask': ratio per token geometric "
                                                                                 "mean, or the product over the "
                                                                                 "sequence.")


class _GRPOFields(_Strict):
    group_size: int = Field(8, ge=2, le=1024, description="GRPO: samples per prompt (G); batch_size must be a "
                                                          "multiple.")
    tis: bool = Field(False, description="GRPO: weight tokens with truncated IS at is_cap (GRPO + TIS).")


class OPDConfig(_OPDFields, TrainingConfig):
    """On-policy distillation: the student samples, the teacher scores every token."""

    method: Literal["opd"] = "opd"

    @model_validator(mode="after")
    def _opd_rules(self) -> "OPDConfig":
        if not self.teacher:
            raise ValueError("teacher: OPD needs a teacher checkpoint")
        if self.mask_lower is not None and self.mask_lower >= self.mask_upper:
            raise ValueError("mask_lower must be below mask_upper")
        return self


class GRPOConfig(TrainingConfig):
    """GRPO: group-relative advantage on an exact-match reward, token-mean, no KL term."""

    method: Literal["grpo"] = "grpo"
    # A field shared with another config reuses its FieldInfo (one declaration: default,
    # bounds, description); type checkers see a FieldInfo assigned, hence the ignores.
    group_size: int = _GRPOFields.model_fields["group_size"]  # type: ignore[assignment]
    tis: bool = _GRPOFields.model_fields["tis"]  # type: ignore[assignment]
    is_cap: float = _OPDFields.model_fields["is_cap"]  # type: ignore[assignment]
    lr: float = Field(1e-4, gt=0.0, le=1.0, description="AdamW peak learning rate (GRPO learned at 1e-4 on the demo "
                                                        "toy pair, where 3e-4 undid the student).")

    @model_validator(mode="after")
    def _grpo_rules(self) -> "GRPOConfig":
        if self.batch_size % self.group_size:
            raise ValueError(f"batch_size {self.batch_size} must be a multiple of group_size {self.group_size}")
        return self


_METHOD_CONFIGS: dict[str, type[OPDConfig] | type[GRPOConfig]] = {"opd": OPDConfig, "grpo": GRPOConfig}


class TrainJobConfig(_GRPOFields, _OPDFields, TrainingConfig):
    """Training under a rollout config: OPD (sync or async) or a GRPO baseline."""

    method: Method = Field("opd", description="'opd' (on-policy distillation) or 'grpo' (RL baseline).")
    lr: float | None = Field(None, gt=0.0, le=1.0,  # type: ignore[assignment]  # None: the method's default
                             description="AdamW peak learning rate; default the method's (OPD "
                                                               "3e-4, GRPO 1e-4).")

    @model_validator(mode="after")
    def _valid_for_method(self) -> "TrainJobConfig":
        self.method_config()
        return self

    def method_config(self) -> OPDConfig | GRPOConfig:
        """This job as its method's own config (which does all the method's validation);
        a field set here, to other than its default, that the method does not take is refused."""
        cls = _METHOD_CONFIGS[self.method]
        fields = type(self).model_fields
        # (a config built on this one, e.g. a calibration's, adds fields that are not the method's choice)
        values = {k: getattr(self, k) for k in self.model_fields_set
                  if k != "method" and k in TrainJobConfig.model_fields}
        others = {k: v for k, v in values.items() if k not in cls.model_fields}
        # Another method's field at its default is what a stored (normalised) config holds: not a choice.
        foreign = sorted(k for k, v in others.items() if v != fields[k].get_default(call_default_factory=True))
        if foreign:
            raise ValueError(f"{', '.join(foreign)}: not used by method {self.method!r}")
        values = {k: v for k, v in values.items() if k not in others}
        if values.get("lr") is None:
            values.pop("lr", None)
        values["method"] = self.method
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise ValueError("; ".join(_problem_line(e) for e in exc.errors(include_url=False))) from None


def _problem_line(err: Mapping[str, Any]) -> str:
    msg = err["msg"].removeprefix("Value error, ")
    loc = ".".join(str(part) for part in err["loc"])
    return f"{loc}: {msg}" if loc else msg


class TrainingArm(_Strict):
    """One training config of a time-to-quality comparison: its rollout engine and staleness."""

    name: str = Field(..., min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.+-]+$")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    async_k: int = Field(0, ge=0, le=64)


def _default_arms() -> list[TrainingArm]:
    # The paper's comparison: synchronous BF16 against FP8 weights and KV cache with one step of staleness.
    fp8 = RolloutConfig(weights="fp8_e4m3", weight_scale="channel", kv_cache="fp8_e4m3")
    return [TrainingArm(name="bf16-sync"), TrainingArm(name="fp8-async1", rollout=fp8, async_k=1)]


class TimeToQualityConfig(_Strict):
    """Time to a target accuracy: two or more training configs, several seeds each."""

    model: str = TrainingConfig.model_fields["model"]  # type: ignore[assignment]
    teacher: str | None = _OPDFields.model_fields["teacher"]  # type: ignore[assignment]
    method: Method = Field("opd", description="'opd' or 'grpo', the same for every arm.")
    loss: OPDLoss = _OPDFields.model_fields["loss"]  # type: ignore[assignment]
    task: str = TrainingConfig.model_fields["task"]  # type: ignore[assignment]
    arms: list[TrainingArm] = Field(default_factory=_default_arms, min_length=2, max_length=8,
                                    description="The configs compared; the first is the baseline of the ratios.")
    seeds: int = Field(3, ge=1, le=16, description="Runs per arm, seeds 0..seeds-1 (paired across arms).")
    target: float = Field(..., gt=0.0, le=1.0, description="Held-out greedy accuracy to reach.")
    steps: int = Field(200, ge=1, le=1_000_000, description="Most steps of one run; a run that does not reach the "
                                                            "target by then counts as not reached.")
    batch_size: int = TrainingConfig.model_fields["batch_size"]  # type: ignore[assignment]
    lr: float | None = TrainJobConfig.model_fields["lr"]  # type: ignore[assignment]
    warmup_steps: int = TrainingConfig.model_fields["warmup_steps"]  # type: ignore[assignment]
    eval_every: int = Field(5, ge=1, le=1_000_000, description="Evaluate every N steps (the resolution of the time "
                                                               "to target).")
    eval_prompts: int = TrainingConfig.model_fields["eval_prompts"]  # type: ignore[assignment]
    device: str = TrainingConfig.model_fields["device"]  # type: ignore[assignment]
    threads: int | None = TrainingConfig.model_fields["threads"]  # type: ignore[assignment]

    @model_validator(mode="after")
    def _arms_valid(self) -> "TimeToQualityConfig":
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arms: names must be unique, got {names}")
        for arm in self.arms:
            self.run_config(arm, 0)
        return self

    def run_config(self, arm: TrainingArm, seed: int) -> OPDConfig | GRPOConfig:
        """The training config of one run: the shared fields, the arm's rollout and staleness, the seed."""
        shared = ("model", "task", "steps", "batch_size", "lr", "warmup_steps", "eval_every", "eval_prompts", "device",
                  "threads")
        values = {k: getattr(self, k) for k in shared if getattr(self, k) is not None}
        if self.method == "opd":
            values.update(teacher=self.teacher, loss=self.loss)
        values.update(method=self.method, rollout=arm.rollout, async_k=arm.async_k, seed=seed, resume=False)
        return TrainJobConfig.model_validate(values).method_config()


def training_config(values: dict) -> OPDConfig | GRPOConfig:
    """A method config from a plain mapping with a ``method`` key; an unknown method or an
    invalid field is a :class:`ConfigError` naming it."""
    method = values.get("method", "opd")
    if method not in _METHOD_CONFIGS:
        raise ConfigError(f"method {method!r} is unknown; known methods: {', '.join(sorted(_METHOD_CONFIGS))}")
    try:
        return TrainJobConfig.model_validate(values).method_config()
    except ValidationError as exc:
        from ..config import describe_validation_error

        raise ConfigError("; ".join(describe_validation_error(exc))) from None


__all__ = ["GRPOConfig", "NoiseDraw", "OPDConfig", "TimeToQualityConfig", "TrainJobConfig", "TrainingArm",
           "TrainingConfig", "training_config"]
