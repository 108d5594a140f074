"""Applying a rollout config to the weights, once, in float32, in this order: staleness
(the snapshot of k steps ago), relative Gaussian noise, quantize-dequantize (or FP8 W8A8
linears), cast to the compute dtype.  Names kept in BF16 are exempt from noise and
quantization; their KV cache stays BF16."""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import torch
from torch import nn

from ...config import RolloutConfig
from ...quant import add_relative_noise, fake_quant_weight
from .fp8_linear import fp8_w8a8, use_scaled_mm
from .loading import TORCH_DTYPES, load_model
from .staleness import apply_staleness
from .targets import RolloutTargets, check_weight_blocks, resolve_targets


@dataclass
class PreparedModel:
    """The perturbed model and what was done to it (reported as the engine's info)."""

    model: nn.Module
    kv_formats: list[str | None]
    kept: set[str] = field(default_factory=set)
    fp8_backend: str = "none"
    quantized: list[str] = field(default_factory=list)


def prepare_rollout_model(model_dir: str, cfg: RolloutConfig, device: torch.device,
                          base_model: nn.Module | None = None) -> PreparedModel:
    """Load the checkpoint (or take ``base_model``, an fp32 copy the caller gives up) and
    turn it into the rollout engine ``cfg`` describes."""
    model = base_model if base_model is not None else load_model(model_dir, device, torch.float32)
    targets = resolve_targets(model, cfg)
    if cfg.staleness:
        apply_staleness(model, model_dir, cfg.staleness)
    with torch.no_grad():
        if cfg.noise_sigma > 0:
            _add_noise(targets, cfg)
        check_weight_blocks(targets, cfg)
    compute = TORCH_DTYPES[cfg.dtype]
    fp8_backend = "none"
    fp8_modules: dict[str, nn.Module] = {}
    with torch.no_grad():
        if cfg.activations != "none":
            use_mm = use_scaled_mm(cfg, device)
            fp8_backend = "scaled_mm" if use_mm and cfg.weight_scale != "block" else "emulated"
            for name in targets.perturbed:
                fp8_modules[name] = fp8_w8a8(targets.linears[name], cfg, use_mm, compute)
        elif cfg.weights != "bf16":
            fp8_backend = "emulated" if cfg.weights.startswith("fp8") else "none"
            for name in targets.perturbed:
                w = targets.linears[name].weight
                w.copy_(fake_quant_weight(w, cfg.weights, cfg.weight_scale, cfg.block_size))
        model.to(compute)
        # After the cast: ``Module.to(dtype)`` would turn the FP8 weights and float32 scales into ``compute``.
        for name, module in fp8_modules.items():
            _set_module(model, name, module)
    quantized = list(targets.perturbed) if cfg.weights != "bf16" else []
    return PreparedModel(model, targets.kv_formats, set(targets.kept), fp8_backend, quantized)


def _add_noise(targets: RolloutTargets, cfg: RolloutConfig) -> None:
    for name in targets.perturbed:
        # Seeded by the module's name, so a module gets the same noise whatever else is kept in BF16
        # (sensitivity measures each unit with exactly the perturbation it has in the full config).
        lin = targets.linears[name]
        seed = (cfg.noise_seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63 - 1)
        gen = torch.Generator(device=lin.weight.device).manual_seed(seed)
        lin.weight.copy_(add_relative_noise(lin.weight, cfg.noise_sigma, gen))


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, module)
