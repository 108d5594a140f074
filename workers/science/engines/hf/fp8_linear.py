"""FP8 W8A8 linear layers (``activations: fp8_e4m3``): what vLLM's online FP8 runs
(``fp8_per_tensor`` / ``fp8_per_channel``) and, with ``weight_scale: block``, the block FP8
of verl's rollouts and DeepSeek-V3 checkpoints (:class:`Fp8BlockLinear`)."""
from __future__ import annotations

import torch
from torch import nn

from ...config import ConfigError, RolloutConfig
from ...quant import fake_quant_weight, quantize_fp8_tensorwise, scaled_mm_available


class Fp8Linear(nn.Module):
    """W8A8 FP8 linear: weight scales per tensor or per output channel, dynamic activation
    scales per tensor or per token (matching).  ``use_scaled_mm`` runs the real FP8 GEMM;
    otherwise the same arithmetic is emulated in float32."""

    def __init__(self, linear: nn.Linear, weight_fmt: str, granularity: str, use_scaled_mm: bool,
                 out_dtype: torch.dtype):
        super().__init__()
        w = linear.weight.detach().float()
        self.fmt = weight_fmt
        self.per_channel = granularity == "channel"
        q, scale = quantize_fp8_tensorwise(w, weight_fmt, dim=1 if self.per_channel else None)
        self.register_buffer("qweight", q)  # [N, K] fp8
        self.register_buffer("wscale", scale.reshape(1, -1) if self.per_channel else scale.reshape(()))
        self.bias = (None if linear.bias is None
                     else nn.Parameter(linear.bias.detach().to(out_dtype), requires_grad=False))
        self.use_scaled_mm = use_scaled_mm
        self.out_dtype = out_dtype
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        xq, xscale = quantize_fp8_tensorwise(x2, "fp8_e4m3", dim=-1 if self.per_channel else None)
        if self.use_scaled_mm:
            m = x2.shape[0]
            pad = (-m) % 16
            if pad:
                xq = torch.cat([xq, xq.new_zeros(pad, xq.shape[1])])
                if self.per_channel:
                    xscale = torch.cat([xscale, xscale.new_ones(pad, 1)])
            sa = xscale if self.per_channel else xscale.reshape(())
            out_dtype = torch.bfloat16 if self.per_channel else self.out_dtype
            y = torch._scaled_mm(xq, self.qweight.t(), scale_a=sa.float(), scale_b=self.wscale.float(),
                                 out_dtype=out_dtype)
            y = y[:m].to(self.out_dtype)
        else:
            wscale = self.wscale.reshape(-1, 1) if self.per_channel else self.wscale
            w = self.qweight.float() * wscale
            y = ((xq.float() * xscale) @ w.t()).to(self.out_dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)


class Fp8BlockLinear(nn.Module):
    """Block W8A8 FP8: weights with one scale per ``block`` x ``block`` tile, activations
    quantized dynamically with one scale per token and group of ``block`` input features
    (vLLM's ``fp8_per_block``: weight ``kFp8Static128BlockSym``, activation
    ``kFp8Dynamic128Sym``).  Emulated in float32: the GEMM of the dequantized operands."""

    def __init__(self, linear: nn.Linear, weight_fmt: str, block: int, out_dtype: torch.dtype):
        super().__init__()
        self.register_buffer("weight_deq", fake_quant_weight(linear.weight, weight_fmt, "block", block))
        self.bias = (None if linear.bias is None
                     else nn.Parameter(linear.bias.detach().to(out_dtype), requires_grad=False))
        self.block, self.out_dtype = block, out_dtype
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        groups = x.reshape(-1, shape[-1] // self.block, self.block)
        xq, xscale = quantize_fp8_tensorwise(groups, "fp8_e4m3", dim=-1)
        x_deq = (xq.float() * xscale).reshape(-1, shape[-1])
        y = (x_deq @ self.weight_deq.t()).to(self.out_dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)


def fp8_w8a8(linear: nn.Linear, cfg: RolloutConfig, use_mm: bool, out_dtype: torch.dtype) -> nn.Module:
    """The W8A8 module ``cfg`` asks for in place of ``linear``."""
    if cfg.weight_scale == "block":
        if use_mm and cfg.fp8_matmul == "scaled_mm":
            raise ConfigError("fp8_matmul scaled_mm: block W8A8 is emulated only; use fp8_matmul auto or emulate")
        return Fp8BlockLinear(linear, cfg.weights, cfg.block_size, out_dtype)
    return Fp8Linear(linear, cfg.weights, cfg.weight_scale, use_mm, out_dtype)


def use_scaled_mm(cfg: RolloutConfig, device: torch.device) -> bool:
    """``fp8_matmul``: ``auto`` takes the real FP8 GEMM where the device has one."""
    if cfg.fp8_matmul == "emulate":
        return False
    if cfg.fp8_matmul == "scaled_mm":
        if not hasattr(torch, "_scaled_mm"):
            raise ConfigError("fp8_matmul scaled_mm: this torch has no torch._scaled_mm")
        return True
    return scaled_mm_available(device)
