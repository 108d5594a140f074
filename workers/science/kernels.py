"""Which GPUs' kernels a measured engine stands for.

The same FP8 config is another engine on another GPU: FP8 GEMMs with FP8 activations (W8A8)
run on Ada (sm_89) and Hopper (sm_90) and newer; on Ampere (A100, sm_80) and older, vLLM runs
``fp8_per_tensor`` with the Marlin kernel (FP8 weights, BF16 activations: weight-only) and
``fp8_per_channel`` does not start.  An admission check records which of these its
measurement stands for (:func:`kernel_record`, in the engine's info), an export says
which architectures it is valid for (:func:`architectures`), and an export for a named GPU
is refused where that GPU runs another kernel than the one admitted (:func:`gpu_refusal`)."""
from __future__ import annotations

from .config import RolloutConfig

#: Where FP8 W8A8 GEMMs run as admitted.
W8A8_GPUS = "Ada (sm_89), Hopper (sm_90) and newer"
#: Where vLLM's FP8 is Marlin weight-only (FP8 weights, BF16 activations).
MARLIN_GPUS = "Ampere (sm_80, sm_86) and older"
ANY_GPU = "any (no FP8 GEMM)"
#: The first compute capability with FP8 tensor cores (Ada, sm_89).
FP8_TENSOR_CORES = (8, 9)

#: The GPU architectures an export can be asked for, by compute capability (``sm_XY``).
GPU_ARCHITECTURES = {
    "sm_100": "Blackwell (B200, GB200)",
    "sm_90": "Hopper (H100, H200)",
    "sm_89": "Ada (L4, L40S, RTX 40xx)",
    "sm_86": "Ampere (A10, A40, RTX 30xx)",
    "sm_80": "Ampere (A100, A30)",
    "sm_75": "Turing (T4)",
    "sm_70": "Volta (V100)",
}


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


def capability_of(arch: str) -> tuple[int, int]:
    """``sm_90`` as ``(9, 0)``; ``sm_100`` as ``(10, 0)``.  A ValueError for a name that is
    not one of :data:`GPU_ARCHITECTURES`."""
    if arch not in GPU_ARCHITECTURES:
        raise ValueError(f"unknown GPU architecture {arch!r}; one of {', '.join(GPU_ARCHITECTURES)}")
    digits = arch.removeprefix("sm_")
    return int(digits[:-1]), int(digits[-1])


def gpu_refusal(cfg: RolloutConfig, arch: str) -> str | None:
    """Why ``cfg``'s engine is not what a GPU of ``arch`` runs (None: it runs as admitted).
    FP8 W8A8 needs FP8 tensor cores (Ada and newer); older GPUs run FP8 weights with BF16
    activations (Marlin, weight-only) or not at all: another engine, whose mismatch was not
    measured.  A weight-only FP8 engine is what only those older GPUs run."""
    kind, name = gemm(cfg), f"{GPU_ARCHITECTURES[arch]}, {arch}"
    has_fp8 = capability_of(arch) >= FP8_TENSOR_CORES
    if kind == "w8a8" and not has_fp8:
        return (f"{name} has no FP8 tensor cores: vLLM runs this FP8 W8A8 config there as Marlin weight-only (FP8 "
                "weights, BF16 activations; fp8_per_channel does not start) and SGLang as another FP8 kernel, not "
                f"the engine admitted ({architectures(cfg)}); export for Ada (sm_89), Hopper (sm_90) or newer, or "
                "admit a config with BF16 weights for these GPUs")
    if kind == "weight_only" and has_fp8:
        return (f"{name} runs FP8 weights with FP8 activations (W8A8), not the weight-only engine admitted "
                f"({architectures(cfg)}); admit activations fp8_e4m3 for these GPUs")
    return None


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


__all__ = ["ANY_GPU", "GPU_ARCHITECTURES", "MARLIN_GPUS", "W8A8_GPUS", "architectures", "capability_of",
           "device_words", "gemm", "gpu_refusal", "kernel_record"]
