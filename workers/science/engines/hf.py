"""The ``hf`` engine: transformers + torch on any device, with precision emulation.

The rollout config is applied to the weights once, in float32, in this order: staleness
(load the snapshot of k steps ago), relative Gaussian noise, quantize-dequantize, cast to
the compute dtype.  Modules listed in ``keep_bf16`` are exempt from noise and quantization.
FP8 W8A8 linears (``activations: fp8_e4m3``) run ``torch._scaled_mm`` where the device has
real FP8 GEMMs and an exact emulation elsewhere.  The FP8 KV cache quantizes keys and
values as they are written, with scales calibrated on the prefill (vLLM's
``calculate_kv_scales``).
"""
from __future__ import annotations

import fnmatch
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from ..config import ConfigError, RolloutConfig, SamplingConfig
from ..quant import (
    add_relative_noise,
    check_block,
    fake_quant_kv,
    fake_quant_weight,
    kv_scale_from,
    quantize_fp8_tensorwise,
    scaled_mm_available,
)
from .base import Rollouts, Scores, prompt_uniforms

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")
SNAPSHOT_DIR = "snapshots"


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def check_model_path(model: str) -> None:
    """Refuse a missing local path early with a clear message (hub ids pass through)."""
    p = Path(model)
    looks_local = model.startswith((".", "/", "~")) or p.exists() or model.count("/") != 1
    if looks_local and not (p / "config.json").is_file():
        if not p.exists():
            raise ConfigError(f"model path {model!r} does not exist")
        raise ConfigError(f"model path {model!r} has no config.json; expected a Hugging Face checkpoint directory")


def load_model(model: str, device: torch.device, dtype: torch.dtype = torch.float32) -> nn.Module:
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    check_model_path(model)
    try:
        m = AutoModelForCausalLM.from_pretrained(model, dtype=dtype)
    except OSError as exc:
        raise ConfigError(f"cannot load model {model!r}: {exc}") from None
    return m.to(device).eval()


def load_tokenizer(model: str):
    from transformers import AutoTokenizer

    check_model_path(model)
    return AutoTokenizer.from_pretrained(model)


def decoder_layer_count(model: nn.Module) -> int:
    return int(model.config.num_hidden_layers)


def decoder_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """Every linear layer inside a decoder layer: the targets of quantization and noise."""
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and _LAYER_RE.search(n)}


def layer_index(name: str) -> int | None:
    m = _LAYER_RE.search(name)
    return int(m.group(1)) if m else None


def kv_pseudo_name(i: int) -> str:
    return f"model.layers.{i}.self_attn.kv_cache"


def resolve_keep_bf16(entries: Sequence[int | str], module_names: Sequence[str], n_layers: int) -> set[str]:
    """Names (linear modules and KV-cache pseudo-names) kept in BF16; errors name the entry."""
    kv_names = [kv_pseudo_name(i) for i in range(n_layers)]
    universe = list(module_names) + kv_names
    kept: set[str] = set()
    for entry in entries:
        if isinstance(entry, int):
            if not 0 <= entry < n_layers:
                raise ConfigError(
                    f"keep_bf16 layer index {entry} is out of range: the model has {n_layers} layers (0..{n_layers - 1})"
                )
            kept.update(n for n in universe if layer_index(n) == entry)
            continue
        if entry.startswith("re:"):
            rx = re.compile(entry[3:])
            hits = [n for n in universe if rx.search(n)]
        else:
            hits = [n for n in universe if fnmatch.fnmatchcase(n, entry)]
        if not hits:
            example = module_names[0] if module_names else "model.layers.0.mlp.up_proj"
            raise ConfigError(f"keep_bf16 pattern {entry!r} matches no module (names look like {example!r})")
        kept.update(hits)
    return kept


# --- staleness -----------------------------------------------------------------------

class SnapshotRing:
    """The weights of the last ``capacity`` optimizer steps, newest last (in memory)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: list[tuple[int, dict[str, torch.Tensor]]] = []

    def push(self, step: int, state: dict[str, torch.Tensor]) -> None:
        self._items.append((step, {k: v.detach().to("cpu", copy=True) for k, v in state.items()}))
        del self._items[: max(0, len(self._items) - self.capacity)]

    def __len__(self) -> int:
        return len(self._items)

    def stale(self, k: int) -> dict[str, torch.Tensor]:
        """Weights of k steps before the newest (k=0: the newest)."""
        if not 0 <= k < len(self._items):
            raise ConfigError(f"staleness {k} needs {k + 1} snapshots; the ring holds {len(self._items)}")
        return self._items[-1 - k][1]

    def save(self, directory: Path) -> None:
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        steps = []
        for step, state in self._items:
            save_file({k: v.contiguous() for k, v in state.items()}, str(directory / f"step_{step:06d}.safetensors"))
            steps.append(step)
        (directory / "index.json").write_text(json.dumps({"steps": steps}))


def load_stale_state(model_dir: str, k: int) -> dict[str, torch.Tensor]:
    """The state dict of ``k`` optimizer steps before the checkpoint, from ``snapshots/``."""
    from safetensors.torch import load_file

    index = Path(model_dir) / SNAPSHOT_DIR / "index.json"
    if not index.is_file():
        raise ConfigError(
            f"staleness {k} needs weight snapshots, but {model_dir!r} has no {SNAPSHOT_DIR}/index.json "
            "(build-toy-models writes one; a training run's snapshot ring can be saved with SnapshotRing.save)"
        )
    steps = json.loads(index.read_text())["steps"]
    if k >= len(steps):
        raise ConfigError(f"staleness {k} is beyond the snapshot ring of {model_dir!r} ({len(steps)} snapshots, max staleness {len(steps) - 1})")
    return load_file(str(Path(model_dir) / SNAPSHOT_DIR / f"step_{steps[-1 - k]:06d}.safetensors"))


# --- FP8 W8A8 linear -----------------------------------------------------------------

class Fp8Linear(nn.Module):
    """W8A8 FP8 linear: weight scales per tensor or per output channel, dynamic activation
    scales per tensor or per token (matching).  ``use_scaled_mm`` runs the real FP8 GEMM;
    otherwise the same arithmetic is emulated in float32."""

    def __init__(self, linear: nn.Linear, weight_fmt: str, granularity: str, use_scaled_mm: bool, out_dtype: torch.dtype):
        super().__init__()
        w = linear.weight.detach().float()
        self.fmt = weight_fmt
        self.per_channel = granularity == "channel"
        q, scale = quantize_fp8_tensorwise(w, weight_fmt, dim=1 if self.per_channel else None)
        self.register_buffer("qweight", q)  # [N, K] fp8
        self.register_buffer("wscale", scale.reshape(1, -1) if self.per_channel else scale.reshape(()))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().to(out_dtype), requires_grad=False)
        self.use_scaled_mm = use_scaled_mm
        self.out_dtype = out_dtype
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        xq, xscale = quantize_fp8_tensorwise(x2, "fp8_e4m3", dim=-1 if self.per_channel else None)
        if self.use_scaled_mm:
            m = x2.shape[0]
            pad = (-m) % 16
            if pad:
                xq = torch.cat([xq, xq.new_zeros(pad, xq.shape[1])])
                if self.per_channel:
                    xscale = torch.cat([xscale, xscale.new_ones(pad, 1)])
            sa = xscale if self.per_channel else xscale.reshape(())
            out_dtype = torch.bfloat16 if self.per_channel else self.out_dtype
            y = torch._scaled_mm(xq, self.qweight.t(), scale_a=sa.float(), scale_b=self.wscale.float(), out_dtype=out_dtype)
            y = y[:m].to(self.out_dtype)
        else:
            wscale = self.wscale.reshape(-1, 1) if self.per_channel else self.wscale
            w = self.qweight.float() * wscale
            y = ((xq.float() * xscale) @ w.t()).to(self.out_dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, module)


# --- applying a rollout config ---------------------------------------------------------

@dataclass
class PreparedModel:
    model: nn.Module
    kv_formats: list[str | None]
    kept: set[str] = field(default_factory=set)
    fp8_backend: str = "none"
    quantized: list[str] = field(default_factory=list)


def prepare_rollout_model(model_dir: str, cfg: RolloutConfig, device: torch.device,
                          base_model: nn.Module | None = None) -> PreparedModel:
    """Load the checkpoint (or take ``base_model``, an fp32 copy the caller gives up) and
    turn it into the rollout engine ``cfg`` describes."""
    model = base_model if base_model is not None else load_model(model_dir, device, torch.float32)
    n_layers = decoder_layer_count(model)
    linears = decoder_linears(model)
    kept = resolve_keep_bf16(cfg.keep_bf16, list(linears), n_layers)
    targets = [n for n in linears if n not in kept]

    if cfg.staleness:
        state = load_stale_state(model_dir, cfg.staleness)
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or [k for k in missing if "rotary" not in k]:
            raise ConfigError(f"snapshot of {model_dir!r} does not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})")

    with torch.no_grad():
        if cfg.noise_sigma > 0:
            for name in targets:
                # Seeded by the module's name, so a module gets the same noise whatever else is kept in BF16
                # (sensitivity measures each unit with exactly the perturbation it has in the full config).
                lin = linears[name]
                seed = (cfg.noise_seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63 - 1)
                gen = torch.Generator(device=lin.weight.device).manual_seed(seed)
                lin.weight.copy_(add_relative_noise(lin.weight, cfg.noise_sigma, gen))
        if cfg.weights != "bf16":
            for name in targets:
                check_block(tuple(linears[name].weight.shape), cfg.weights, cfg.weight_scale, cfg.block_size, f"{name}.weight")

    compute = TORCH_DTYPES[cfg.dtype]
    fp8_backend = "none"
    fp8_modules: dict[str, Fp8Linear] = {}
    with torch.no_grad():
        if cfg.activations != "none":
            use_mm = _choose_scaled_mm(cfg, device)
            fp8_backend = "scaled_mm" if use_mm else "emulated"
            for name in targets:
                fp8_modules[name] = Fp8Linear(linears[name], cfg.weights, cfg.weight_scale, use_mm, compute)
        elif cfg.weights != "bf16":
            fp8_backend = "emulated" if cfg.weights.startswith("fp8") else "none"
            for name in targets:
                w = linears[name].weight
                w.copy_(fake_quant_weight(w, cfg.weights, cfg.weight_scale, cfg.block_size))
        model.to(compute)
        # After the cast: ``Module.to(dtype)`` would turn the FP8 weights and float32 scales into ``compute``.
        for name, module in fp8_modules.items():
            _set_module(model, name, module)
    kv_formats = [
        None if cfg.kv_cache == "none" or kv_pseudo_name(i) in kept else cfg.kv_cache for i in range(n_layers)
    ]
    return PreparedModel(model, kv_formats, kept, fp8_backend, targets if cfg.weights != "bf16" else [])


def _choose_scaled_mm(cfg: RolloutConfig, device: torch.device) -> bool:
    if cfg.fp8_matmul == "emulate":
        return False
    if cfg.fp8_matmul == "scaled_mm":
        if not hasattr(torch, "_scaled_mm"):
            raise ConfigError("fp8_matmul scaled_mm: this torch has no torch._scaled_mm")
        return True
    return scaled_mm_available(device)


def _make_cache(kv_formats: list[str | None], granularity: str):
    from transformers import DynamicCache

    if not any(kv_formats):
        return DynamicCache()

    class Fp8KvCache(DynamicCache):
        """Keys and values pass through FP8 on the way into the cache."""

        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            fmt = kv_formats[layer_idx]
            if fmt is not None:
                if layer_idx not in scales:
                    scales[layer_idx] = (
                        kv_scale_from(key_states, fmt, granularity),
                        kv_scale_from(value_states, fmt, granularity),
                    )
                ks, vs = scales[layer_idx]
                key_states = fake_quant_kv(key_states, fmt, ks)
                value_states = fake_quant_kv(value_states, fmt, vs)
            return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    scales: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    return Fp8KvCache()


def left_pad(prompt_ids: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompt_ids)
    ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
    for i, p in enumerate(prompt_ids):
        if len(p):
            ids[i, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
            mask[i, width - len(p):] = 1
    return ids.to(device), mask.to(device)


def _positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.cumsum(-1) - 1).clamp_min(0)


def choose_tokens(logits: torch.Tensor, sampling: SamplingConfig, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling in vocabulary order with one uniform per row (common random
    numbers across engines); temperature 0 is greedy; top-p keeps the smallest set of most
    likely tokens whose mass reaches ``top_p``."""
    if sampling.temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.double() / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep_sorted = (sorted_p.cumsum(-1) - sorted_p) < sampling.top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = probs * keep
    cdf = probs.cumsum(-1)
    target = (u.to(cdf.device) * cdf[:, -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return idx.clamp_max(logits.shape[-1] - 1)


class HFEngine:
    """Rollouts and scoring with a transformers model; see the module docstring."""

    name = "hf"

    def __init__(self, model_dir: str, cfg: RolloutConfig | None = None, device: str | torch.device = "auto",
                 prepared: PreparedModel | None = None) -> None:
        self.cfg = cfg or RolloutConfig(dtype="fp32")
        self.device = resolve_device(device) if isinstance(device, str) else device
        self.prepared = prepared or prepare_rollout_model(model_dir, self.cfg, self.device)
        self.model = self.prepared.model
        conf = self.model.config
        self.vocab_size = int(conf.vocab_size)
        eos = getattr(conf, "eos_token_id", None)
        self.eos_token_id = eos[0] if isinstance(eos, (list, tuple)) else eos
        pad = getattr(conf, "pad_token_id", None)
        self.pad_token_id = int(pad if pad is not None else (self.eos_token_id or 0))

    @classmethod
    def trainer(cls, model_dir: str, dtype: str = "fp32", device: str | torch.device = "auto") -> "HFEngine":
        """The trainer reference: the checkpoint at full precision, no perturbation."""
        return cls(model_dir, RolloutConfig(dtype=dtype), device)

    @torch.no_grad()
    def sample(self, prompt_ids, sampling: SamplingConfig, seed: int, offset: int = 0, return_full: bool = False) -> Rollouts:
        b = len(prompt_ids)
        steps = sampling.max_new_tokens
        u = prompt_uniforms(seed, offset, b, steps)
        ids, attn = left_pad(prompt_ids, self.pad_token_id, self.device)
        cache = _make_cache(self.prepared.kv_formats, self.cfg.kv_scale)
        tokens = torch.full((b, steps), self.pad_token_id, dtype=torch.long, device=self.device)
        mask = torch.zeros((b, steps), dtype=torch.bool, device=self.device)
        lps = torch.zeros((b, steps), dtype=torch.float32, device=self.device)
        fulls = [] if return_full else None
        done = torch.zeros(b, dtype=torch.bool, device=self.device)
        inp, pos = ids, _positions(attn)
        t = 0
        for t in range(steps):
            out = self.model(input_ids=inp, attention_mask=attn, position_ids=pos, past_key_values=cache, use_cache=True)
            logits = out.logits[:, -1, :].float()
            logp = torch.log_softmax(logits, dim=-1)
            nxt = choose_tokens(logits, sampling, u[:, t])
            alive = ~done
            tokens[:, t] = torch.where(alive, nxt, torch.full_like(nxt, self.pad_token_id))
            mask[:, t] = alive
            lps[:, t] = torch.where(alive, logp.gather(-1, nxt[:, None]).squeeze(-1), torch.zeros_like(lps[:, t]))
            if fulls is not None:
                fulls.append(logp)
            if self.eos_token_id is not None and not sampling.ignore_eos:
                done = done | (nxt == self.eos_token_id)
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
    def score(self, prompt_ids, tokens: torch.Tensor, mask: torch.Tensor, return_full: bool = False) -> Scores:
        ids, attn = left_pad(prompt_ids, self.pad_token_id, self.device)
        p = ids.shape[1]
        resp = tokens.to(self.device)
        full_ids = torch.cat([ids, resp], dim=1)
        full_attn = torch.cat([attn, mask.to(self.device).long()], dim=1)
        out = self.model(input_ids=full_ids, attention_mask=full_attn, position_ids=_positions(full_attn), use_cache=False)
        logits = out.logits[:, p - 1 : p - 1 + resp.shape[1], :].float()
        logp = torch.log_softmax(logits, dim=-1)
        lp = logp.gather(-1, resp[..., None]).squeeze(-1) * mask.to(self.device)
        return Scores(lp.cpu(), logp if return_full else None)

    def close(self) -> None:
        self.model = None
        self.prepared = None
