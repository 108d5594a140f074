"""slime: command-line flags for its training script, against the flags of the commit in
``manifests/slime.json`` (read from its source; slime ignores unknown flags silently, so
that manifest is the check).  FP8 rollouts come from a block-FP8 copy of the checkpoint made
with slime's own converter; SGLang options pass through as ``--sglang-<option>``."""
from __future__ import annotations

import json
from pathlib import Path

from opdweb.exports.base import Provenance, comment_block, gpu_note, nearest_engine, refuse_if
from opdweb.exports.quoting import shell_word
from workers.science.checkpoint_facts import CheckpointFacts
from workers.science.config import RolloutConfig
from workers.science.vllm_args import kv_cache_refusals, screening_refusals

MANIFEST = json.loads((Path(__file__).parent / "manifests" / "slime.json").read_text())
TARGET = f"slime {MANIFEST['commit'][:12]} (SGLang {MANIFEST['sglang'].split()[0]})"
ICEPOP = "slime.backends.megatron_utils.loss.icepop_function"
#: Its rollout engine, pinned by its Dockerfile (the README's table of targets).
ENGINE_PIN = f"SGLang {MANIFEST['sglang'].split()[0]} (no vLLM)"
GPUS = "FP8 W8A8: Ada (sm_89), Hopper (sm_90) and newer (SGLang's FP8 kernels; not checked here below Ada); BF16: any"

#: What slime builds from each part of a rollout config (the README's table of targets).
BUILDS = {
    "weights": "an FP8 E4M3 checkpoint made by `tools/convert_hf_to_fp8.py`: `--strategy block --block-size 128 128` "
               "(128x128 blocks) or `--strategy tensor` (per-tensor scales); its weight sync re-quantizes the same way",
    "activations": "always FP8 with FP8 weights: dynamic (per token and group of 128 with block weights; per tensor "
                   "or per token, as SGLang's kernel picks, with per-tensor weights)",
    "kv_cache": "`--sglang-kv-cache-dtype fp8_e4m3`; scales from the checkpoint, else 1.0",
    "keep_bf16": "cannot be expressed (the converter's unquantized modules and the weight sync's names are fixed)",
    "staleness": "`train_async.py --update-weights-interval k` (about k); 0: `train.py`",
    "correction": "TIS `--use-tis --tis-clip C`; IcePop `--custom-tis-function-path ...icepop_function`; "
                  "ratio-bound masking cannot be expressed (OPSM is a KL threshold)",
    "logprobs": "SGLang's logprobs of the sampled tokens",
}


def converter_strategy(config: RolloutConfig) -> str | None:
    """The ``--strategy`` of slime's FP8 converter that makes ``config``'s weights (None: none does)."""
    if not (config.weights == "fp8_e4m3" and config.activations == "fp8_e4m3"):
        return None
    if config.weight_scale == "block" and config.block_size == 128:
        return "block"
    return "tensor" if config.weight_scale == "tensor" else None


def fp8_refusals(config: RolloutConfig) -> list[str]:
    """Where slime's FP8 checkpoint (its converter's block or tensor strategy, dynamic FP8
    activations: W8A8) is not ``config``'s quantization.  Its channel strategy writes a
    compressed-tensors checkpoint that the weight sync (``quantize_params_fp8``: quant_method
    fp8 only) does not re-quantize."""
    if config.weights == "bf16" or converter_strategy(config):
        return []
    return [f"weights {config.weights} / weight_scale {config.weight_scale} / activations {config.activations}: "
            "slime's FP8 checkpoint converter builds 128x128 block (--strategy block) or per-tensor "
            "(--strategy tensor) FP8 E4M3 weights with dynamic FP8 activations (W8A8); admit weights fp8_e4m3, "
            "activations fp8_e4m3 and weight_scale tensor, or weight_scale block with block_size 128"]


def refusals(config: RolloutConfig, facts: CheckpointFacts | None, method: str | None = None) -> list[str]:
    """Where slime would run another rollout engine or correction than ``config``'s."""
    problems = screening_refusals(config) + fp8_refusals(config)
    if config.keep_bf16:
        problems.append("keep_bf16: slime cannot keep modules in BF16: tools/convert_hf_to_fp8.py has no skip list "
                        "(the modules it leaves unquantized are hard-coded) and its weight sync quantizes a fixed set "
                        "of Megatron names, and SGLang has no per-layer KV-cache exception")
    problems += kv_cache_refusals(config, facts, "SGLang")
    if config.sampling.temperature <= 0:
        problems.append("temperature 0: slime's --rollout-temperature must be > 0")
    if config.correction.kind == "mask":
        problems.append("correction mask: slime's sequence masking is OPSM (--use-opsm, a KL threshold), not "
                        "bounds on the sequence's ratio")
    return problems


def nearest(config: RolloutConfig) -> dict:
    """The nearest engine slime runs: per-tensor W8A8 FP8 from per-tensor weights, else
    block, nothing kept in BF16, KV scales 1.0, sampled (temperature > 0), no ratio-bound
    sequence masking."""
    changes: dict = {}
    if config.sampling.temperature <= 0:
        changes["sampling"] = {"temperature": 1.0}
    if config.correction.kind == "mask":
        changes["correction"] = {"kind": "none"}
    fp8 = "tensor" if config.weight_scale == "tensor" else "block"
    return nearest_engine(config, "slime", fp8=fp8, keeps_layers=False, **changes)


def slime_flags(config: RolloutConfig, provenance: Provenance, facts: CheckpointFacts) -> str:
    """Command-line flags for slime's training script; refused (NotExpressible) where slime
    would build another engine."""
    refuse_if(TARGET, refusals(config, facts))
    sampling = config.sampling
    checkpoint = provenance.checkpoint
    notes = gpu_note(config, "SGLang runs another FP8 kernel (not checked here)")
    strategy = converter_strategy(config)
    if strategy:
        checkpoint = checkpoint.rstrip("/") + "-fp8"
        notes.append(f"first: python tools/convert_hf_to_fp8.py --model-dir {shell_word(provenance.checkpoint)} "
                     f"--save-dir {shell_word(checkpoint)} --strategy {strategy}"
                     + (" --block-size 128 128" if strategy == "block" else ""))
    if strategy == "tensor":
        notes.append("SGLang scales activations per tensor or per token as its FP8 kernel picks; the admission check "
                     "measured per-tensor activation scales, the coarser of the two")
    flags = [f"--hf-checkpoint {shell_word(checkpoint)}"]
    if config.kv_cache != "none":
        flags.append(f"--sglang-kv-cache-dtype {config.kv_cache}")
    flags += [
        f"--rollout-temperature {sampling.temperature!r}",
        f"--rollout-top-p {sampling.top_p!r}",
        f"--rollout-max-response-len {sampling.max_new_tokens}",
        f"--seed {config.seed}",
    ]
    if config.staleness:
        flags.append(f"--update-weights-interval {config.staleness}")
        notes.append(f"run train_async.py: rollouts are about {config.staleness} steps off-policy")
    else:
        notes.append("run train.py (synchronous): rollouts are on-policy")
    c = config.correction
    if c.kind == "tis":
        flags += ["--use-tis", f"--tis-clip {c.cap!r}", "--tis-clip-low 0.0"]
    elif c.kind == "icepop":
        flags += ["--use-tis", f"--custom-tis-function-path {ICEPOP}", f"--tis-clip-low {c.low!r}",
                  f"--tis-clip {c.high!r}"]
    if provenance.method and provenance.method.startswith("opd"):
        flags.append("--use-opd")
        notes.append("set the teacher: --opd-type and --opd-teacher-load")
    return "\n".join(comment_block(provenance, TARGET, notes) + [" \\\n".join(flags)]) + "\n"
