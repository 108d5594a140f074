"""The ``vllm`` rollout engine of a training run: built once, its weights replaced by the
trainer's after every update, as verl and OpenRLHF sync theirs.

The engine core runs in this process (:class:`~..engines.vllm_engine.VLLMEngine`'s
default), so a sync hands the trainer's tensors over without copying them through a
socket: cast to the engine's dtype (as a trainer sends BF16), the worker's
``reload_weights`` (vLLM's in-place layerwise reload) loads them by their checkpoint names
and re-runs each layer's post-load processing (``process_weights_after_loading``, where
the CPU backend may re-pack linear weights for its GEMM kernels), which a bare
``model.load_weights`` skips.  (On this project's CPU both give the engine the new weights;
``reload_weights`` is vLLM's own path for in-place updates.)  After a sync
the prefix cache is reset, so no KV computed with the old weights is reused.  Closing an
in-process vLLM engine tears down vLLM's process-wide state (its distributed groups), which
every other engine in the process uses: the run closes its engines together, at its end.

One engine per vLLM build (dtype, quantization, KV cache dtype, seed): the rollout
config's, and the BF16 unit's where that differs (only on a GPU, where vLLM runs FP8).
Each engine remembers which version of the trainer's weights it holds, so a version is
pushed once however many batches it samples (async ``k`` steps behind: the weights of
step ``t - k``).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping

import torch

from ..config import RolloutConfig
from ..engines.hf.loading import TORCH_DTYPES
from ..engines.vllm_engine import VLLMEngine


def _build_key(cfg: RolloutConfig) -> tuple:
    """What fixes a vLLM engine at construction (everything else is per request)."""
    return cfg.dtype, cfg.weights, cfg.kv_cache, cfg.seed


class SyncedVLLM:
    """vLLM engines that follow a trainer's weights; ``sync_s`` totals the seconds spent
    pushing weights."""

    def __init__(self, model_dir: str, max_model_len: int | None = None, block_size: int | None = None) -> None:
        self.model_dir = model_dir
        self.engine_options: dict[str, Any] = {"max_model_len": max_model_len, "block_size": block_size}
        self._engines: dict[tuple, VLLMEngine] = {}
        self._versions: dict[tuple, int] = {}
        self.sync_s = 0.0

    def engine(self, cfg: RolloutConfig, version: int,
               weights: Callable[[], Mapping[str, torch.Tensor]]) -> VLLMEngine:
        """The engine for ``cfg`` holding the trainer's weights of ``version``; ``weights``
        gives them (checkpoint names) when the engine holds another version."""
        key = _build_key(cfg)
        if key not in self._engines:
            self._engines[key] = VLLMEngine(self.model_dir, cfg, **self.engine_options)
        engine = self._engines[key]
        if self._versions.get(key) != version:
            self.push(engine, weights(), TORCH_DTYPES[cfg.dtype])
            self._versions[key] = version
        return engine

    def push(self, engine: VLLMEngine, weights: Mapping[str, torch.Tensor], dtype: torch.dtype) -> None:
        """Load ``weights`` (cast to ``dtype``) into the running ``engine`` and drop its cached prefixes."""
        t0 = time.perf_counter()
        tensors = ((name, t.to(dtype)) for name, t in weights.items())
        engine.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": tensors, "is_checkpoint_format": True})
        engine.llm.reset_prefix_cache()
        self.sync_s += time.perf_counter() - t0

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()
        self._versions.clear()
