"""Which GPUs' kernels a measurement stands for (issue 38): FP8 W8A8 is Ada / Hopper's
kernels; on Ampere and older vLLM runs ``fp8_per_tensor`` as Marlin weight-only (FP8
weights, BF16 activations), so a weight-only measurement stands for those GPUs."""
import pytest

from workers.science.config import RolloutConfig
from workers.science.kernels import ANY_GPU, MARLIN_GPUS, W8A8_GPUS, capability_of, gpu_refusal, kernel_record


def test_each_gemm_stands_for_the_gpus_whose_kernels_compute_it():
    w8a8 = RolloutConfig(weights="fp8_e4m3", activations="fp8_e4m3")
    assert kernel_record(w8a8, "emulated", "cpu") == {
        "gemm": "w8a8", "backend": "emulated", "ran_on": "cpu",
        "stands_for": "Ada (sm_89), Hopper (sm_90) and newer: FP8 W8A8 kernels"}
    assert kernel_record(w8a8, "scaled_mm", "cuda", (9, 0), "NVIDIA H200")["ran_on"] == "NVIDIA H200 (sm_90)"
    weight_only = kernel_record(RolloutConfig(weights="fp8_e4m3"), "emulated", "cpu")
    assert weight_only["gemm"] == "weight_only" and weight_only["stands_for"].startswith(MARLIN_GPUS)
    assert kernel_record(RolloutConfig(kv_cache="fp8_e4m3"), "none", "cpu")["stands_for"] == ANY_GPU
    assert W8A8_GPUS in kernel_record(w8a8, "scaled_mm", "cpu")["stands_for"]


def test_the_hf_engine_records_its_kernels_in_its_info(student):
    from workers.science.engines.hf.engine import HFEngine

    info = HFEngine(student, RolloutConfig(weights="fp8_e4m3", activations="fp8_e4m3"), "cpu").info()
    assert info["kernels"] == {"gemm": "w8a8", "backend": "emulated", "ran_on": "cpu",
                               "stands_for": "Ada (sm_89), Hopper (sm_90) and newer: FP8 W8A8 kernels"}


def test_an_export_for_a_gpu_without_fp8_tensor_cores_is_refused_for_w8a8_and_weight_only_the_other_way():
    assert (capability_of("sm_80"), capability_of("sm_89"), capability_of("sm_100")) == ((8, 0), (8, 9), (10, 0))
    with pytest.raises(ValueError, match="unknown GPU architecture 'sm_99'"):
        capability_of("sm_99")
    w8a8 = RolloutConfig(weights="fp8_e4m3", activations="fp8_e4m3")
    weight_only = RolloutConfig(weights="fp8_e4m3")
    bf16_kv = RolloutConfig(kv_cache="fp8_e4m3")
    # FP8 tensor cores from Ada (sm_89) on: W8A8 runs as admitted there and nowhere older
    for arch in ("sm_89", "sm_90", "sm_100"):
        assert gpu_refusal(w8a8, arch) is None and "weight-only engine admitted" in gpu_refusal(weight_only, arch)
    for arch in ("sm_86", "sm_80", "sm_75", "sm_70"):
        assert "Marlin weight-only" in gpu_refusal(w8a8, arch) and gpu_refusal(weight_only, arch) is None
    assert all(gpu_refusal(bf16_kv, arch) is None for arch in ("sm_70", "sm_80", "sm_90"))
