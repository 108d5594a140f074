"""Which GPUs' kernels a measured engine stands for.

The same FP8 config is another engine on another GPU: FP8 GEMMs with FP8 activations (W8A8)
run on Ada (sm_89) and Hopper (sm_90) and newer; on Ampere (A100, sm_80) and older, vLLM runs
``fp8_per_tensor`` with the Marlin kernel (FP8 weights, BF16 activations: weight-only) and
``fp8_per_channel`` does not start.  An admission check records which of these its
measurement stands for (:func:`kernel_record`, in the engine's info), and an export says
which architectures it is valid for (:func:`architectures`)."""
from __future__ import annotations

from .config import RolloutConfig

#: Where FP8 W8A8 GEMMs run as admitted.
W8A8_GPUS = "Ada (sm_89), Hopper (sm_90) and newer"
#: Where vLLM's FP8 is Marlin weight-only (FP8 weights, BF16 activations).
MARLIN_GPUS = "Ampere (sm_80, sm_86) and older"
ANY_GPU = "any (no FP8 GEMM)"


def gemm(cfg: RolloutConfig) -> str:
    """The matmul the config's weights make: ``bf16``, ``w8a8`` (FP8 weights and activations)
    or ``weight_only`` (quantized weights, BF16 activations)."""
    if cfg.weights == "bf16":
        return "bf16"
    return "w8a8" if cfg.activations != "none" else "weight_only"


def architectures(cfg: RolloutConfig) -> str:
    """The GPU architectures whose kernels are the engine ``cfg`` describes."""
    return {"bf16": ANY_GPU, "w8a8": f"{W8A8_GPUS}: FP8 W8A8 kernels",
            "weight_only": f"{MARLIN_GPUS}: Marlin weight-only kernels (FP8 weights, BF16 activations)"}[gemm(cfg)]


def device_words(device_type: str, capability: tuple[int, int] | None, name: str | None) -> str:
    """The device a measurement ran on, in words: ``cpu``, ``NVIDIA H200 (sm_90)``."""
    if device_type != "cuda" or capability is None:
        return device_type
    return f"{name or 'cuda'} (sm_{capability[0]}{capability[1]})"


def kernel_record(cfg: RolloutConfig, fp8_backend: str, device_type: str,
                  capability: tuple[int, int] | None = None, name: str | None = None) -> dict:
    """What an HF-engine measurement of ``cfg`` stands for: the GEMM it ran (``gemm``), how
    (``backend``: ``scaled_mm`` real FP8 GEMMs, ``emulated`` in float32, ``none``), where
    (``ran_on``), and the GPU architectures whose kernels those numbers are (``stands_for``)."""
    return {"gemm": gemm(cfg), "backend": fp8_backend, "ran_on": device_words(device_type, capability, name),
            "stands_for": architectures(cfg)}


__all__ = ["ANY_GPU", "MARLIN_GPUS", "W8A8_GPUS", "architectures", "device_words", "gemm", "kernel_record"]
