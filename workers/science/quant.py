"""Precision emulation: FP8 / INT fake quantization, FP8 KV cache, weight noise.

Every function here is a pure tensor transform with its error bound stated, so tests can
check round trips against the format's definition:

* FP8 E4M3 (max 448, 3 mantissa bits): relative error <= 2^-4 for normal values, absolute
  error <= 2^-10 * scale below the smallest normal (2^-6 * scale).
* FP8 E5M2 (max 57344, 2 mantissa bits): relative error <= 2^-3; absolute <= 2^-17 * scale
  below 2^-14 * scale.
* INT8 symmetric, levels -127..127, scale amax / 127; INT4 as GPTQ / AWQ store it: 16
  levels -8..7 (a 4-bit code 0..15 around zero point 8), scale 2 * amax / 15 so that
  [-amax, amax] spans -7.5..7.5 steps (-amax rounds to -8; +amax saturates at 7, half a
  step off).  Absolute error <= scale / 2 in both.
"""
from __future__ import annotations

import torch

from .config import ConfigError

FP8_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
FP8_MAX = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}
#: Integer levels (lowest, highest) and the amax-to-scale divisor of each INT format.
INT_LEVELS = {"int8": (-127, 127), "int4": (-8, 7)}
INT_SCALE_DIVISOR = {"int8": 127.0, "int4": 7.5}
#: (mantissa bits, exponent of the smallest normal) per FP8 format, for the error bounds.
FP8_SPEC = {"fp8_e4m3": (3, -6), "fp8_e5m2": (2, -14)}

_TINY = 1e-12
TINY = _TINY


def _group_amax(w: torch.Tensor, granularity: str, block: int, two_d_blocks: bool) -> torch.Tensor:
    """amax broadcastable to ``w`` (2-D, [out, in]) for the given scale granularity."""
    a = w.abs()
    if granularity == "tensor":
        return a.amax().reshape(1, 1)
    if granularity == "channel":
        return a.amax(dim=1, keepdim=True)
    out_f, in_f = w.shape
    if two_d_blocks:
        blocks = a.reshape(out_f // block, block, in_f // block, block).amax(dim=(1, 3))
        return blocks.repeat_interleave(block, 0).repeat_interleave(block, 1)
    groups = a.reshape(out_f, in_f // block, block).amax(dim=2)
    return groups.repeat_interleave(block, 1)


def check_block(shape: tuple[int, ...], fmt: str, granularity: str, block: int, name: str) -> None:
    """Raise :class:`ConfigError` when ``block`` does not tile the weight ``shape``."""
    if granularity != "block":
        return
    out_f, in_f = shape
    dims = (out_f, in_f) if fmt.startswith("fp8") else (in_f,)
    for d in dims:
        if d % block:
            raise ConfigError(
                f"block_size {block} does not divide {name} of shape {tuple(shape)}; "
                f"choose a block size that divides {', '.join(map(str, dims))}"
            )


def fake_quant_weight(w: torch.Tensor, fmt: str, granularity: str = "tensor", block: int = 128) -> torch.Tensor:
    """Quantize-dequantize a 2-D weight in float32; same shape, values on the format's grid.

    FP8 ``block`` scales are square ``block``x``block`` tiles (DeepSeek-V3 style); INT
    ``block`` scales are groups of ``block`` along the input dimension (GPTQ/AWQ style).
    """
    if fmt == "bf16":
        return w
    w32 = w.detach().float()
    if w32.dim() != 2:
        raise ValueError(f"fake_quant_weight expects a 2-D weight, got shape {tuple(w.shape)}")
    check_block(tuple(w32.shape), fmt, granularity, block, "weight")
    amax = _group_amax(w32, granularity, block, two_d_blocks=fmt.startswith("fp8")).clamp_min(_TINY)
    if fmt in FP8_DTYPES:
        scale = amax / FP8_MAX[fmt]
        q = (w32 / scale).clamp(-FP8_MAX[fmt], FP8_MAX[fmt]).to(FP8_DTYPES[fmt]).float()
        return q * scale
    if fmt in INT_LEVELS:
        lo, hi = INT_LEVELS[fmt]
        scale = amax / INT_SCALE_DIVISOR[fmt]
        q = torch.round(w32 / scale).clamp(lo, hi)
        return q * scale
    raise ConfigError(f"unknown weight format {fmt!r}")


def quantize_fp8_tensorwise(x: torch.Tensor, fmt: str, dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Real FP8 values and float32 scales (per tensor, or per slice along ``dim`` kept)."""
    x32 = x.float()
    if dim is None:
        amax = x32.abs().amax().reshape(())
    else:
        amax = x32.abs().amax(dim=dim, keepdim=True)
    scale = amax.clamp_min(_TINY) / FP8_MAX[fmt]
    q = (x32 / scale).clamp(-FP8_MAX[fmt], FP8_MAX[fmt]).to(FP8_DTYPES[fmt])
    return q, scale


def fake_quant_kv(x: torch.Tensor, fmt: str, scale: torch.Tensor) -> torch.Tensor:
    """FP8 KV-cache round trip with a fixed (calibrated) scale; values beyond saturate."""
    x32 = x.float()
    q = (x32 / scale).clamp(-FP8_MAX[fmt], FP8_MAX[fmt]).to(FP8_DTYPES[fmt]).float()
    return (q * scale).to(x.dtype)


def kv_scale_from(x: torch.Tensor, fmt: str, granularity: str) -> torch.Tensor:
    """Calibrate a KV scale from the first (prefill) states, [batch, kv_heads, seq, head_dim]."""
    x32 = x.detach().float().abs()
    if granularity == "tensor":
        amax = x32.amax().reshape(1, 1, 1, 1)
    elif granularity == "head":
        amax = x32.amax(dim=(0, 2, 3), keepdim=True)
    else:
        raise ConfigError(f"unknown kv_scale {granularity!r}")
    return amax.clamp_min(_TINY) / FP8_MAX[fmt]


def add_relative_noise(w: torch.Tensor, sigma: float, generator: torch.Generator) -> torch.Tensor:
    """``w + sigma * rms(w) * N(0, 1)``: noise relative to the tensor's RMS.  The noise is
    drawn on the generator's device (CPU and CUDA streams differ for the same seed)."""
    if sigma == 0:
        return w
    w32 = w.detach().float()
    rms = w32.pow(2).mean().sqrt()
    noise = torch.randn(w32.shape, generator=generator, dtype=torch.float32, device=generator.device)
    return w32 + sigma * rms * noise.to(w32.device)


def fp8_error_bound(x: torch.Tensor, fmt: str, scale: torch.Tensor | float) -> torch.Tensor:
    """Largest allowed |x - fake_quant(x)| elementwise for an FP8 format and scale."""
    mant, min_exp = FP8_SPEC[fmt]
    scale_t = torch.as_tensor(scale, dtype=torch.float32)
    rel = x.abs() * 2.0 ** -(mant + 1)
    sub = scale_t * 2.0 ** (min_exp - mant - 1)
    return torch.maximum(rel, sub.expand_as(x) if sub.dim() else sub * torch.ones_like(x))


def scaled_mm_available(device: torch.device) -> bool:
    """Real FP8 GEMMs: CUDA devices of compute capability 8.9 (Ada) / 9.0 (Hopper) and newer."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    major, minor = torch.cuda.get_device_capability(device)
    return (major, minor) >= (8, 9) and hasattr(torch, "_scaled_mm")
