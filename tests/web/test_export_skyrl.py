"""The SkyRL export, checked by SkyRL's own code at the pinned wheel: its config dataclasses
and ``validate_cfg`` accept every file it does not refuse and hold the admitted values, and
its own off-policy correction functions, run on the file's settings, keep exactly the tokens
and sequences the config means (hand-computed ratios)."""
from typing import Optional, Tuple

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from opdweb.exports import FORMATS, render
from opdweb.exports.skyrl_source import SkyRLRefuses, check, ppo_names
from opdweb.exports.trainer_source import definitions
from opdweb.exports.verification import override_lines, skyrl_dir
from opdweb.rollouts.canonical import canonical_rollout
from tests.dependencies import needs_pinned_vllm, needs_skyrl
from tests.web.test_export_loaders import FACTS, MATRIX, PROVENANCE, export_or_refusal

pytestmark = needs_skyrl


def skyrl_config(partial: dict):
    text = render(FORMATS["skyrl"], canonical_rollout(partial), PROVENANCE, FACTS)
    return check(skyrl_dir(), override_lines(text))


@needs_pinned_vllm
@pytest.mark.parametrize("partial", MATRIX)
def test_skyrl_accepts_every_export_it_does_not_refuse_with_the_admitted_values(partial):
    from opdweb.exports.verification import check as check_export

    text, reasons = export_or_refusal("skyrl", partial)
    if text is None:
        assert reasons and all(r.strip() for r in reasons)
        assert bool(partial["staleness"]) == any(r.startswith("staleness") for r in reasons)
        return
    assert partial["staleness"] == 0
    assert check_export("skyrl", text) == []
    cfg = skyrl_config(partial)
    kwargs = cfg.generator.inference_engine.engine_init_kwargs
    assert cfg.trainer.policy.model.path == PROVENANCE.checkpoint and kwargs["logprobs_mode"] == "processed_logprobs"
    assert kwargs.get("kv_cache_dtype") == partial.get("kv_cache")
    assert kwargs.get("quantization") == ("fp8_per_tensor" if partial.get("weights") else None)
    assert cfg.trainer.algorithm.temperature == cfg.generator.sampling_params.temperature == 1.0
    correction = cfg.trainer.algorithm.off_policy_correction
    kind = partial["correction"]["kind"]
    assert correction.tis_ratio_type == ("token" if kind == "tis" else None)
    assert (correction.token_mask_is_threshold_low, correction.token_mask_is_threshold_high) == (
        (0.5, 5.0) if kind == "icepop" else (None, None))


def test_skyrls_config_code_refuses_what_skyrl_refuses():
    """Hand cases from SkyRL 0.3.0's source: an unknown key (vLLM's name for SkyRL's
    max_generate_length), a correction type it does not know, more than one logprob, a loss
    its registry lacks, batch sizes that do not divide."""
    for overrides, words in ((["generator.sampling_params.max_tokens=64"], "Invalid fields {'max_tokens'}"),
                             (["trainer.algorithm.off_policy_correction.tis_ratio_type=tokens"], "tis_ratio_type"),
                             (["generator.sampling_params.logprobs=2"], "should be 0 or 1"),
                             (["trainer.algorithm.policy_loss_type=ppo"], "invalid policy_loss_type: ppo"),
                             (["trainer.train_batch_size=100", "trainer.policy_mini_batch_size=64"], "divisible")):
        with pytest.raises(SkyRLRefuses, match=words.replace("{", "\\{").replace("}", "\\}")):
            check(skyrl_dir(), overrides)
    assert {"rollout_is", "dppo", "regular"} <= {m.value for m in ppo_names(skyrl_dir())["PolicyLossType"]}


@needs_pinned_vllm
def test_an_engine_argument_skyrls_vllm_lacks_fails_the_check_though_skyrl_takes_it():
    from opdweb.exports.verification import check as check_export

    text = render(FORMATS["skyrl"], canonical_rollout({"kv_cache": "fp8_e4m3", "kv_scales": "unit"}), PROVENANCE,
                  FACTS)
    later = text + "generator.inference_engine.engine_init_kwargs.max_num_active_seqs=8\n"
    assert check_export("skyrl", later) == [
        "SkyRL's vLLM server would not start as admitted: vLLM 0.23.0 has no engine argument 'max_num_active_seqs'"]


@needs_pinned_vllm
def test_skyrls_vllm_has_per_tensor_fp8_but_not_per_channel_so_the_export_refuses_it():
    from opdweb.exports import pinned_vllm
    from opdweb.exports.verification import pinned_vllm_dir

    accepted = pinned_vllm.literal_values(pinned_vllm_dir("skyrl"), *pinned_vllm.CHOICES["quantization"])
    assert "fp8_per_tensor" in accepted and "fp8_per_channel" not in accepted
    assert "fp8_per_channel" in pinned_vllm.literal_values(pinned_vllm_dir("prime-rl"),
                                                           *pinned_vllm.CHOICES["quantization"])
    text, reasons = export_or_refusal("skyrl", {"weights": "fp8_e4m3", "weight_scale": "channel",
                                                "activations": "fp8_e4m3", "staleness": 0})
    assert text is None and any("has no fp8_per_channel" in r for r in reasons)


def correction_functions() -> dict:
    utils = skyrl_dir() / "skyrl" / "backends" / "skyrl_train" / "utils"
    namespace = definitions(utils / "torch_utils.py", ["safe_exp_delta"], {"torch": torch})
    return definitions(utils / "off_policy_correction_utils.py", ["compute_token_mask", "compute_sequence_mask",
                                                                  "compute_tis_ratio"],
                       {**namespace, "torch": torch, "DictConfig": DictConfig, "Optional": Optional, "Tuple": Tuple})


def test_skyrls_own_correction_functions_keep_what_the_config_means():
    """Ratios p_train / p_rollout of [3, 0.3, 1, 4.5]: IcePop [0.5, 5] keeps [1, 0, 1, 1]
    (the config's rule, low <= ratio <= high); TIS with cap 2 weighs them [2, 0.3, 1, 2];
    sequence masking [0.5, 2] on the geometric mean: sequences of ratios [3, 3] (mean 3) and
    [1, 1.2] (mean 1.095) keep [0, 1]."""
    functions = correction_functions()
    ratios = torch.tensor([[3.0, 0.3, 1.0, 4.5]], dtype=torch.float64)
    rollout = torch.full_like(ratios, -1.0)
    old = rollout + ratios.log()  # SkyRL's ratio: exp(old_log_probs - rollout_logprobs)
    ones = torch.ones_like(ratios)

    icepop = OmegaConf.create(vars(skyrl_config({"correction": {"kind": "icepop", "low": 0.5, "high": 5.0}})
                                   .trainer.algorithm.off_policy_correction))
    mask, _ = functions["compute_token_mask"](old, rollout, ones, icepop)
    assert mask.tolist() == [[1.0, 0.0, 1.0, 1.0]]

    tis = OmegaConf.create(vars(skyrl_config({"correction": {"kind": "tis", "cap": 2.0}})
                                .trainer.algorithm.off_policy_correction))
    weights, _ = functions["compute_tis_ratio"](old, rollout, ones, tis.tis_ratio_type, tis)
    assert weights.flatten().tolist() == pytest.approx([2.0, 0.3, 1.0, 2.0])

    sequence = OmegaConf.create(vars(skyrl_config({"correction": {"kind": "mask", "low": 0.5, "high": 2.0}})
                                     .trainer.algorithm.off_policy_correction))
    pairs = torch.tensor([[3.0, 3.0], [1.0, 1.2]], dtype=torch.float64)
    kept, _ = functions["compute_sequence_mask"](pairs.log() - 1.0, torch.full_like(pairs, -1.0),
                                                 torch.ones_like(pairs), sequence.sequence_mask_metric, sequence)
    assert kept.flatten().tolist() == [0.0, 1.0]
