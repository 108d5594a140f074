"""The ``hf`` engine: transformers + torch on any device, with precision emulation.

One module per concern, the engine a thin composition of them:

* :mod:`.loading`    device, checkpoint path check, model and tokenizer loading
* :mod:`.targets`    which linears / KV caches a config perturbs (``keep_bf16``), per-layer KV formats
* :mod:`.staleness`  the snapshot ring and loading the weights of k steps ago
* :mod:`.fp8_linear` the FP8 W8A8 linear layer (``torch._scaled_mm`` or exact emulation)
* :mod:`.prepare`    applying a rollout config to the weights (:class:`PreparedModel`)
* :mod:`.kv_scales`  static FP8 KV scales per checkpoint (from the checkpoint, a stored calibration, or one run)
* :mod:`.kv_cache`   the FP8 KV cache, quantizing keys and values with those static scales
* :mod:`.sampling`   left padding, positions, inverse-CDF sampling with common random numbers
* :mod:`.engine`     :class:`HFEngine` (``sample`` / ``score``)
"""
from __future__ import annotations

from .engine import HFEngine
from .fp8_linear import Fp8Linear
from .loading import TORCH_DTYPES, check_model_path, load_model, load_tokenizer, resolve_device
from .prepare import PreparedModel, prepare_rollout_model
from .staleness import SnapshotRing, load_stale_state
from .targets import RolloutTargets, check_weight_blocks, kv_pseudo_name, resolve_keep_bf16, resolve_targets

__all__ = [
    "Fp8Linear",
    "HFEngine",
    "PreparedModel",
    "RolloutTargets",
    "SnapshotRing",
    "TORCH_DTYPES",
    "check_model_path",
    "check_weight_blocks",
    "kv_pseudo_name",
    "load_model",
    "load_stale_state",
    "load_tokenizer",
    "prepare_rollout_model",
    "resolve_device",
    "resolve_keep_bf16",
    "resolve_targets",
]
