"""An approved rollout config in the words of the trainer that will run it: vLLM engine
arguments, verl overrides, prime-rl TOML, slime flags, or plain YAML.

Pure functions of the canonical config and its provenance (no Django, no torch), so each
mapping is checked against hand-written expected text.  Key spellings follow the tools'
own (vLLM ``quantization`` / ``kv_cache_dtype``; verl ``actor_rollout_ref.rollout.*`` and
``algorithm.rollout_correction.*``; prime-rl ``[inference.vllm]`` and
``max_off_policy_steps``; slime ``--sglang-kv-cache-dtype``, ``--use-tis``).  What a tool
cannot express (per-channel scales in vLLM's online FP8, staleness in slime) is said in a
note inside the export, never dropped silently.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import yaml

#: Token-level truncated importance sampling, the correction every export turns on.
TIS_THRESHOLD = 2.0

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass(frozen=True)
class Provenance:
    """What an export vouches for: which config, cleared by whom, on what evidence."""

    config_hash: str
    config_name: str
    checkpoint: str
    approval_id: int
    approved_by: str
    approved_at: str
    admission_job_id: int
    verdict: str
    multiple: float | None

    def line(self) -> str:
        measured = f"{self.multiple:g}x BF16, " if self.multiple is not None else ""
        return (f"opdweb rollout config {self.config_hash} ({self.config_name}) for {self.checkpoint}; "
                f"approval #{self.approval_id} by {self.approved_by} at {self.approved_at}; "
                f"admission check #{self.admission_job_id}: {measured}{self.verdict}")


def notes(config: dict, target: str) -> list[str]:
    """What ``target`` cannot take from ``config`` as it stands."""
    out = []
    weights, scale = config["weights"], config["weight_scale"]
    if weights in ("int8", "int4"):
        out.append(f"{weights} weights: load a checkpoint quantized to {weights} (GPTQ/AWQ/compressed-tensors); "
                   f"the engine has no online {weights} quantization")
    if weights == "fp8_e5m2":
        out.append("fp8_e5m2 weights: the engines' online FP8 is E4M3; load a checkpoint quantized to E5M2")
    if weights.startswith("fp8") and scale != "tensor":
        what = "per-channel" if scale == "channel" else f"{config['block_size']}x{config['block_size']} block"
        out.append(f"{what} FP8 weight scales: online FP8 quantization uses per-tensor scales; "
                   f"load a checkpoint quantized with {what} scales (llm-compressor)")
    if config["noise_sigma"] > 0:
        out.append(f"noise_sigma {config['noise_sigma']:g} is a screening perturbation, not an engine setting; "
                   "it is not exported")
    if weights.startswith("fp8") and target == "slime":
        out.append("FP8 weights: --hf-checkpoint must name an FP8-quantized copy of the checkpoint")
    if config["staleness"] > 0 and target == "slime":
        out.append(f"staleness {config['staleness']}: slime has no off-policy step limit flag; "
                   "set the asynchronous rollout depth in your launcher")
    return out


def _fp8_weights(config: dict) -> bool:
    return config["weights"].startswith("fp8")


def _kv_layers_kept(config: dict) -> list[int]:
    """Layer indices in keep_bf16: the whole layer, KV cache included, stays BF16."""
    return [entry for entry in config["keep_bf16"] if isinstance(entry, int)]


def _ignored_layers(config: dict) -> list[str]:
    """keep_bf16 as module-name patterns: a layer index names the whole layer."""
    return [f"model.layers.{e}.*" if isinstance(e, int) else e for e in config["keep_bf16"]]


def vllm_engine_args(config: dict, provenance: Provenance) -> str:
    """JSON: ``LLM(**engine_args)`` and ``SamplingParams(**sampling_params)``."""
    engine = {"model": provenance.checkpoint, "dtype": TORCH_DTYPES[config["dtype"]]}
    if _fp8_weights(config):
        engine["quantization"] = "fp8"
        if config["keep_bf16"]:
            engine["hf_overrides"] = {"quantization_config": {
                "quant_method": "fp8", "activation_scheme": "dynamic", "ignored_layers": _ignored_layers(config)}}
    engine["kv_cache_dtype"] = "auto" if config["kv_cache"] == "none" else config["kv_cache"]
    if config["kv_cache"] != "none":
        engine["calculate_kv_scales"] = True
        if _kv_layers_kept(config):
            engine["kv_cache_dtype_skip_layers"] = [str(i) for i in _kv_layers_kept(config)]
    engine["seed"] = config["seed"]
    sampling = config["sampling"]
    document = {
        "opdweb": {**asdict(provenance), "notes": notes(config, "vllm")},
        "engine_args": engine,
        "sampling_params": {"temperature": sampling["temperature"], "top_p": sampling["top_p"],
                            "max_tokens": sampling["max_new_tokens"], "ignore_eos": sampling["ignore_eos"],
                            "logprobs": 0},
    }
    return json.dumps(document, indent=2) + "\n"


def _comment_block(provenance: Provenance, config: dict, target: str) -> list[str]:
    return [f"# {provenance.line()}"] + [f"# note: {n}" for n in notes(config, target)]


def verl_overrides(config: dict, provenance: Provenance) -> str:
    """Hydra overrides for verl's trainer command line, one per line."""
    sampling = config["sampling"]
    lines = _comment_block(provenance, config, "verl") + [
        f"actor_rollout_ref.model.path={provenance.checkpoint}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.dtype={TORCH_DTYPES[config['dtype']]}",
    ]
    if _fp8_weights(config):
        lines.append("actor_rollout_ref.rollout.quantization=fp8")
    if config["kv_cache"] != "none":
        kv = "fp8" if config["kv_cache"] == "fp8_e4m3" else config["kv_cache"]
        lines.append(f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype={kv}")
    lines += [
        f"actor_rollout_ref.rollout.temperature={sampling['temperature']}",
        f"actor_rollout_ref.rollout.top_p={sampling['top_p']}",
        f"data.max_response_length={sampling['max_new_tokens']}",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        "algorithm.rollout_correction.rollout_is=token",
        f"algorithm.rollout_correction.rollout_is_threshold={TIS_THRESHOLD}",
    ]
    if config["staleness"] > 0:
        lines.append(f"trainer.v1.sampler.max_off_policy_threshold={config['staleness']}")
    return "\n".join(lines) + "\n"


def prime_rl_toml(config: dict, provenance: Provenance) -> str:
    """The rollout part of a prime-rl config file."""
    sampling = config["sampling"]
    lines = _comment_block(provenance, config, "prime-rl") + [
        "",
        "[orchestrator]",
        f"max_off_policy_steps = {config['staleness']}",
        "",
        "[orchestrator.sampling]",
        f"temperature = {sampling['temperature']}",
        f"max_tokens = {sampling['max_new_tokens']}",
        "",
        "[inference.model]",
        f"name = {json.dumps(provenance.checkpoint)}",
        f"dtype = \"{TORCH_DTYPES[config['dtype']]}\"",
        "",
        "[inference.vllm]",
    ]
    if _fp8_weights(config):
        lines.append('quantization = "fp8"')
    lines.append(f"kv_cache_dtype = \"{'auto' if config['kv_cache'] == 'none' else config['kv_cache']}\"")
    return "\n".join(lines) + "\n"


def slime_flags(config: dict, provenance: Provenance) -> str:
    """Command-line flags for slime's training script."""
    sampling = config["sampling"]
    flags = [f"--hf-checkpoint {provenance.checkpoint}"]
    if config["kv_cache"] != "none":
        flags.append(f"--sglang-kv-cache-dtype {config['kv_cache']}")
    flags += [
        f"--rollout-temperature {sampling['temperature']}",
        f"--rollout-top-p {sampling['top_p']}",
        f"--rollout-max-response-len {sampling['max_new_tokens']}",
        "--use-tis",
        f"--tis-clip {TIS_THRESHOLD}",
    ]
    return "\n".join(_comment_block(provenance, config, "slime") + [" \\\n".join(flags)]) + "\n"


def plain_yaml(config: dict, provenance: Provenance) -> str:
    """The canonical config itself, with its provenance."""
    document = {"opdweb": {**asdict(provenance), "notes": notes(config, "yaml")}, "rollout": config}
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


@dataclass(frozen=True)
class ExportFormat:
    slug: str
    title: str
    extension: str
    content_type: str
    render: object  # (config, provenance) -> str


FORMATS = {f.slug: f for f in [
    ExportFormat("vllm", "vLLM engine arguments (JSON)", "json", "application/json", vllm_engine_args),
    ExportFormat("verl", "verl overrides", "txt", "text/plain", verl_overrides),
    ExportFormat("prime-rl", "prime-rl (TOML)", "toml", "application/toml", prime_rl_toml),
    ExportFormat("slime", "slime flags", "sh", "text/plain", slime_flags),
    ExportFormat("yaml", "plain YAML", "yaml", "application/yaml", plain_yaml),
]}
