import math

import pytest
import torch

from workers.science.config import ConfigError
from workers.science.quant import (
    FP8_MAX,
    add_relative_noise,
    fake_quant_kv,
    fake_quant_weight,
    fp8_error_bound,
    kv_scale_from,
)


def weight(out=256, inp=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out, inp, generator=g) * 0.05
    w[3, 7] = 0.9  # an outlier, so per-tensor and per-block scales differ
    w[10, :] *= 1e-4  # a nearly-zero row exercises the subnormal range
    return w


def scales(w, fmt, granularity, block=128):
    a = w.abs()
    if granularity == "tensor":
        amax = a.amax().expand_as(w)
    elif granularity == "channel":
        amax = a.amax(1, keepdim=True).expand_as(w)
    else:
        o, i = w.shape
        amax = a.reshape(o // block, block, i // block, block).amax((1, 3))
        amax = amax.repeat_interleave(block, 0).repeat_interleave(block, 1)
    return amax / FP8_MAX[fmt]


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("granularity", ["tensor", "channel", "block"])
def test_fp8_round_trip_is_within_the_format_bound(fmt, granularity):
    w = weight()
    q = fake_quant_weight(w, fmt, granularity, 128)
    bound = fp8_error_bound(w, fmt, scales(w, fmt, granularity))
    err = (q - w).abs()
    assert bool((err <= bound * (1 + 1e-5) + 1e-12).all()), float((err - bound).max())
    assert err.max() > 0  # it did quantize


def test_fp8_values_already_on_the_grid_survive_exactly():
    # amax 448 gives scale 1: representable E4M3 values must come back unchanged
    w = torch.tensor([[448.0, 1.0, -2.5, 0.015625, 3.25, -448.0, 0.0, 96.0]])
    assert torch.equal(fake_quant_weight(w, "fp8_e4m3", "tensor"), w)


def test_finer_scales_are_more_accurate():
    w = weight()
    errs = [float((fake_quant_weight(w, "fp8_e4m3", g) - w).pow(2).mean()) for g in ("tensor", "block", "channel")]
    assert errs[0] > errs[1] and errs[0] > errs[2]


@pytest.mark.parametrize("fmt,lo,hi,divisor", [("int8", -127, 127, 127.0), ("int4", -8, 7, 7.5)])
@pytest.mark.parametrize("granularity", ["tensor", "channel", "block"])
def test_int_round_trip_is_within_half_a_step(fmt, lo, hi, divisor, granularity):
    """INT8 symmetric -127..127; INT4 as GPTQ/AWQ: 16 levels -8..7, step 2 * amax / 15."""
    w = weight()
    q = fake_quant_weight(w, fmt, granularity, 64)
    if granularity == "tensor":
        steps = (w.abs().amax() / divisor).expand_as(w)
    elif granularity == "channel":
        steps = (w.abs().amax(1, keepdim=True) / divisor).expand_as(w)
    else:
        steps = (w.abs().reshape(256, 4, 64).amax(2) / divisor).repeat_interleave(64, 1)
    assert bool(((q - w).abs() <= steps / 2 * (1 + 1e-5)).all())
    # every value is an integer multiple of its step, within the format's levels
    k = (q / steps).round()
    assert torch.allclose(q / steps, k, atol=1e-3)
    assert int(k.min()) >= lo and int(k.max()) <= hi


def test_int4_uses_all_sixteen_levels():
    # amax 7.5 makes the step exactly 1: -7.5 rounds to the -8 level, +7.5 saturates at 7 (GPTQ's symmetric grid)
    w = torch.arange(-7.5, 7.75, 0.25).reshape(1, -1)
    q = fake_quant_weight(w, "int4", "tensor")
    assert torch.unique(q).tolist() == [float(v) for v in range(-8, 8)]


def test_a_block_size_that_does_not_divide_is_refused():
    with pytest.raises(ConfigError, match="block_size 96 does not divide"):
        fake_quant_weight(weight(), "fp8_e4m3", "block", 96)
    with pytest.raises(ConfigError, match="does not divide"):
        fake_quant_weight(weight(128, 100), "int4", "block", 64)


def test_noise_is_relative_to_the_tensor_rms():
    w = weight(512, 512)
    rms = float(w.pow(2).mean().sqrt())
    g = torch.Generator().manual_seed(0)
    noisy = add_relative_noise(w, 0.1, g)
    ratio = float((noisy - w).std()) / rms
    assert math.isclose(ratio, 0.1, rel_tol=0.02)
    g2 = torch.Generator().manual_seed(0)
    assert torch.equal(add_relative_noise(w, 0.1, g2), noisy)  # seeded
    assert add_relative_noise(w, 0.0, g) is w


@pytest.mark.parametrize("granularity", ["tensor", "head"])
def test_kv_round_trip_within_bound(granularity):
    g = torch.Generator().manual_seed(1)
    k = torch.randn(2, 4, 16, 64, generator=g)
    k[:, 2] *= 10.0  # a loud head
    s = kv_scale_from(k, "fp8_e4m3", granularity)
    assert s.shape == ((1, 1, 1, 1) if granularity == "tensor" else (1, 4, 1, 1))
    q = fake_quant_kv(k, "fp8_e4m3", s)
    assert bool(((q - k).abs() <= fp8_error_bound(k, "fp8_e4m3", s.expand_as(k)) * (1 + 1e-5)).all())


def test_kv_values_beyond_the_calibrated_range_saturate():
    s = torch.tensor(1.0 / 448).reshape(1, 1, 1, 1)
    x = torch.full((1, 1, 1, 4), 3.0)
    assert torch.allclose(fake_quant_kv(x, "fp8_e4m3", s), torch.full_like(x, 1.0))


def test_fp8_linear_real_scaled_mm_matches_the_emulation():
    from workers.science.engines.hf import Fp8Linear

    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 48, bias=True)
    x = torch.randn(5, 7, 64)
    for gran in ("tensor", "channel"):
        emu = Fp8Linear(lin, "fp8_e4m3", gran, use_scaled_mm=False, out_dtype=torch.float32)(x)
        try:
            real = Fp8Linear(lin, "fp8_e4m3", gran, use_scaled_mm=True, out_dtype=torch.float32)(x)
        except (RuntimeError, NotImplementedError) as exc:  # pragma: no cover - depends on the build
            pytest.skip(f"torch._scaled_mm unavailable here: {exc}")
        ref = lin(x)
        assert torch.allclose(real, emu, atol=2e-2, rtol=2e-2)
        # FP8 W8A8 error is a few percent of the output scale, never zero
        rel = float((emu - ref).norm() / ref.norm())
        assert 1e-4 < rel < 0.1


def test_block_w8a8_quantizes_activations_per_token_group_as_vllm_fp8_per_block():
    """Where every activation group is exactly representable after its own scale, the block
    W8A8 output is the block-quantized weight's GEMM exactly; an outlier in one group leaves
    the other groups' precision alone (a per-tensor activation scale would flush them)."""
    from workers.science.engines.hf.fp8_linear import Fp8BlockLinear, Fp8Linear
    from workers.science.quant import fake_quant_weight

    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4, bias=False)
    block = Fp8BlockLinear(lin, "fp8_e4m3", block=4, out_dtype=torch.float32)
    w_deq = fake_quant_weight(lin.weight, "fp8_e4m3", "block", 4)
    # each group of 4 has amax 448 (scale 1) and small integers, all exact in E4M3
    x = torch.tensor([[448.0, 3.0, -5.0, 1.0, 7.0, -448.0, 2.0, 0.0]])
    assert torch.equal(block(x), x @ w_deq.t())
    # group 0 tiny, group 1 huge: group 0 keeps E4M3's relative precision (2^-4 per element)
    # under its own scale, where one per-tensor scale (1e4 / 448) flushes it to zero
    x = torch.tensor([[1e-3, -2e-3, 3e-3, 4e-3, 1e4, 0.0, 0.0, 0.0]])
    group0 = torch.cat([x[:, :4], torch.zeros(1, 4)], dim=1)
    outlier_only = torch.cat([torch.zeros(1, 4), x[:, 4:]], dim=1)
    bound = 2.0**-4 * (group0.abs() @ w_deq.abs().t())
    assert bool(((block(group0) - group0 @ w_deq.t()).abs() <= bound).all())
    assert float(block(group0).abs().max()) > 0
    per_tensor = Fp8Linear(lin, "fp8_e4m3", "tensor", use_scaled_mm=False, out_dtype=torch.float32)
    assert torch.equal(per_tensor(x), per_tensor(outlier_only))
    assert not torch.equal(block(x), block(outlier_only))


def test_a_block_w8a8_config_prepares_block_modules_and_stays_near_the_trainer(student):
    from workers.science.config import RolloutConfig
    from workers.science.engines.hf.fp8_linear import Fp8BlockLinear
    from workers.science.engines.hf.prepare import prepare_rollout_model

    cfg = RolloutConfig(weights="fp8_e4m3", weight_scale="block", block_size=32, activations="fp8_e4m3", dtype="fp32")
    prepared = prepare_rollout_model(student, cfg, torch.device("cpu"))
    modules = [m for m in prepared.model.modules() if isinstance(m, Fp8BlockLinear)]
    assert modules and len(modules) == len(prepared.quantized) and prepared.fp8_backend == "emulated"
