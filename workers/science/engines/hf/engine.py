"""The ``hf`` engine: a prepared transformers model (:mod:`.prepare`), decoded with the
FP8-aware KV cache (:mod:`.kv_cache`) and common-random-number sampling (:mod:`.sampling`)."""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

from ...config import RolloutConfig, SamplingConfig
from ...kernels import kernel_record
from ..base import Rollouts, Scores, logprob_temperature, special_token_ids
from .kv_cache import make_cache
from .kv_scales import KvAmax, calibration_prompt_ids, static_kv_amax, unit_kv_amax
from .loading import load_model, load_model_config, load_tokenizer, resolve_device
from .prepare import PreparedModel, prepare_rollout_model
from .sampling import choose_tokens, left_pad, positions, prompt_uniforms, race_tokens, step_exponentials

#: Decode steps between two ``on_step`` calls of :meth:`HFEngine.sample`.
PROGRESS_EVERY = 8


class HFEngine:
    """Rollouts and scoring with a transformers model on any device, every precision option.

    ``base_model`` is an fp32 copy of the checkpoint the caller gives up (a measurement
    session hands its loaded weights over instead of reading the checkpoint again).  An FP8
    KV cache gets static scales (:mod:`.kv_scales`): from the checkpoint, else calibrated on
    ``task``'s calibration prompts and stored in ``cache_dir`` or beside the checkpoint."""

    name = "hf"

    def __init__(self, model_dir: str, cfg: RolloutConfig | None = None, device: str | torch.device = "auto",
                 base_model: nn.Module | None = None, task: str | None = None, cache_dir: str | None = None) -> None:
        self.cfg = cfg or RolloutConfig(dtype="fp32")
        self.device = resolve_device(device)
        self.kv_amax: KvAmax | None = None
        if self.cfg.kv_cache != "none" and self.cfg.kv_scales == "unit":
            config = load_model_config(model_dir)
            heads = int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
            self.kv_amax = unit_kv_amax(int(config.num_hidden_layers), heads, self.cfg.kv_cache)
        elif self.cfg.kv_cache != "none":
            if base_model is None:
                base_model = load_model(model_dir, self.device, torch.float32)
            eos, pad = special_token_ids(base_model.config)
            prompts = calibration_prompt_ids(model_dir, load_tokenizer(model_dir), task)
            self.kv_amax = static_kv_amax(model_dir, base_model, prompts, eos, pad, cache_dir)
        self.prepared: PreparedModel | None = prepare_rollout_model(model_dir, self.cfg, self.device, base_model)
        self.model = self.prepared.model
        self.vocab_size = int(self.model.config.vocab_size)
        self.eos_token_id, self.pad_token_id = special_token_ids(self.model.config)

    @classmethod
    def trainer(cls, model_dir: str, dtype: str = "fp32", device: str | torch.device = "auto") -> "HFEngine":
        """The trainer reference: the checkpoint at full precision, no perturbation."""
        return cls(model_dir, RolloutConfig(dtype=dtype), device)

    def info(self) -> dict:
        """What the config did to the model: FP8 backend, quantized / kept modules, FP8 KV
        layers, and the GPUs whose kernels it stands for."""
        p = self.prepared
        assert p is not None, "the engine is closed"
        cuda = self.device.type == "cuda"
        return {
            "fp8_backend": p.fp8_backend,
            "kernels": kernel_record(self.cfg, p.fp8_backend, self.device.type,
                                     torch.cuda.get_device_capability(self.device) if cuda else None,
                                     torch.cuda.get_device_name(self.device) if cuda else None),
            "quantized_modules": len(p.quantized),
            "kept_bf16": sorted(p.kept),
            "kv_fp8_layers": [i for i, f in enumerate(p.kv_formats) if f],
            "layers": len(p.kv_formats),
            "kv_scales": self.kv_scales_info(),
        }

    def kv_scales_info(self) -> dict | None:
        """Where the static KV scales came from and, for one scale per layer, the scales
        themselves (what :mod:`workers.science.kv_scale_artifact` deploys with the config)."""
        p = self.prepared
        assert p is not None, "the engine is closed"
        if self.kv_amax is None or not any(p.kv_formats):
            return None
        info = self.kv_amax.info()
        if self.cfg.kv_scale == "tensor":
            info["per_layer"] = self.kv_amax.per_layer(self.cfg.kv_cache)
        return info

    @torch.no_grad()
    def sample(self, prompt_ids: Sequence[Sequence[int]], sampling: SamplingConfig, seed: int, offset: int = 0,
               return_full: bool = False, on_step: Callable[[int, int], None] | None = None,
               coupling: str = "inverse_cdf") -> Rollouts:
        b = len(prompt_ids)
        steps = sampling.max_new_tokens
        u = prompt_uniforms(seed, offset, b, steps)
        ids, attn = left_pad(prompt_ids, self.pad_token_id, self.device)
        assert self.prepared is not None, "the engine is closed"
        cache = make_cache(self.prepared.kv_formats, self.cfg.kv_scale, self.kv_amax)
        temperature = logprob_temperature(sampling)
        tokens = torch.full((b, steps), self.pad_token_id, dtype=torch.long, device=self.device)
        mask = torch.zeros((b, steps), dtype=torch.bool, device=self.device)
        lps = torch.zeros((b, steps), dtype=torch.float32, device=self.device)
        fulls: list[torch.Tensor] | None = [] if return_full else None
        done = torch.zeros(b, dtype=torch.bool, device=self.device)
        inp, pos = ids, positions(attn)
        t = 0
        for t in range(steps):
            # logits of the last position only: the prompt's would be [B, P, V] for a real vocabulary
            out = self.model(input_ids=inp, attention_mask=attn, position_ids=pos, past_key_values=cache,
                             use_cache=True, logits_to_keep=1)
            logits = out.logits[:, -1, :].float()
            logp = torch.log_softmax(logits / temperature, dim=-1)
            if coupling == "gumbel":
                nxt = race_tokens(logits, sampling, step_exponentials(seed, offset, b, t, logits.shape[-1]))
            else:
                nxt = choose_tokens(logits, sampling, u[:, t])
            alive = ~done
            tokens[:, t] = torch.where(alive, nxt, torch.full_like(nxt, self.pad_token_id))
            mask[:, t] = alive
            lps[:, t] = torch.where(alive, logp.gather(-1, nxt[:, None]).squeeze(-1), torch.zeros_like(lps[:, t]))
            if fulls is not None:
                fulls.append(logp)
            if self.eos_token_id is not None and not sampling.ignore_eos:
                done = done | (nxt == self.eos_token_id)
            if on_step is not None and (t + 1) % PROGRESS_EVERY == 0:
                on_step(t + 1, steps)
            if bool(done.all()):
                break
            inp = tokens[:, t : t + 1]
            attn = torch.cat([attn, alive.long()[:, None]], dim=1)
            pos = pos[:, -1:] + 1
        n = t + 1
        full = torch.stack(fulls, dim=1) if fulls is not None else None
        # Full distributions stay on the device: [B, L, V] is large for real vocabularies.
        return Rollouts([list(p) for p in prompt_ids], tokens[:, :n].cpu(), mask[:, :n].cpu(), lps[:, :n].cpu(), full)

    @torch.no_grad()
    def score(self, prompt_ids: Sequence[Sequence[int]], tokens: torch.Tensor, mask: torch.Tensor,
              return_full: bool = False, temperature: float = 1.0) -> Scores:
        """Teacher-forced logprobs of ``tokens`` under ``log_softmax(logits / temperature)``."""
        ids, attn = left_pad(prompt_ids, self.pad_token_id, self.device)
        resp = tokens.to(self.device)
        full_ids = torch.cat([ids, resp], dim=1)
        full_attn = torch.cat([attn, mask.to(self.device).long()], dim=1)
        # logits from the last prompt position on (the response's predictions), not the whole prompt's
        out = self.model(input_ids=full_ids, attention_mask=full_attn, position_ids=positions(full_attn),
                         use_cache=False, logits_to_keep=resp.shape[1] + 1)
        logits = out.logits[:, : resp.shape[1], :].float()
        logp = torch.log_softmax(logits / temperature, dim=-1)
        lp = logp.gather(-1, resp[..., None]).squeeze(-1) * mask.to(self.device)
        return Scores(lp.cpu(), logp if return_full else None)

    def close(self) -> None:
        self.model = None
        self.prepared = None
