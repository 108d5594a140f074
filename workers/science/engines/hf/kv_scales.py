"""Static FP8 KV-cache scales, as real engines use them: fixed per checkpoint, never per batch.

vLLM reads ``k_scale`` / ``v_scale`` from the checkpoint (else uses 1.0); llm-compressor
calibrates them once on a calibration set.  A scale computed from each batch's prefill
(left padding included) makes the result depend on ``batch_size`` and on which prompts
share a batch, which no serving engine does.

Here the scales come from, in this order:

1. the checkpoint, where its safetensors hold ``model.layers.i.self_attn.k_scale`` /
   ``v_scale`` (vLLM's names; ``k_proj.output_scale`` / ``v_proj.output_scale`` too); the
   checkpoint's scale is for E4M3, so its absolute maximum is ``scale * 448``;
2. a stored calibration (``kv-amax-<key>.json``) in the product's cache directory or beside
   the checkpoint (``opdweb_kv_scales/``), keyed by the checkpoint's content, the
   calibration prompts and the code version;
3. a calibration run, stored for next time: the checkpoint in BF16 decodes the calibration
   prompts greedily; the absolute maximum of every key and value entering the cache is
   recorded per layer and KV head, padding excluded.

The scale of a layer is ``amax / FP8_MAX[fmt]``, per KV head (``kv_scale: head``) or the
maximum over heads (``kv_scale: tensor``); values beyond saturate.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from torch import nn
from transformers import DynamicCache

from ...atomic_files import write_atomically
from ...config import ConfigError
from ...fingerprint import MEASUREMENT_VERSION, checkpoint_digest, digest_of, token_ids_digest
from ...quant import FP8_MAX, TINY

#: Calibration set size and decode length (prompts decoded greedily by the BF16 checkpoint).
CALIBRATION_PROMPTS = 64
CALIBRATION_NEW_TOKENS = 64
STORE_DIR_BESIDE_CHECKPOINT = "opdweb_kv_scales"
#: The format vLLM's checkpoint ``k_scale`` / ``v_scale`` are written for.
CHECKPOINT_SCALE_FORMAT = "fp8_e4m3"


@dataclass
class KvAmax:
    """Per layer and KV head, the absolute maximum of keys and of values the cache holds."""

    keys: list[list[float]]
    values: list[list[float]]
    source: str  # "checkpoint" | "calibrated" | "stored calibration"
    path: str | None = None
    meta: dict = field(default_factory=dict)

    def scales(self, layer: int, fmt: str, granularity: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(key scale, value scale) of ``layer``: [1, 1, 1, 1] per tensor, [1, H, 1, 1] per head."""
        out = []
        for amax in (self.keys[layer], self.values[layer]):
            a = torch.tensor(amax, dtype=torch.float32)
            a = a.amax().reshape(1, 1, 1, 1) if granularity == "tensor" else a.reshape(1, -1, 1, 1)
            out.append(a.clamp_min(TINY) / FP8_MAX[fmt])
        return out[0], out[1]

    def info(self) -> dict:
        return {"source": self.source, "path": self.path, **self.meta}

    def per_layer(self, fmt: str) -> dict:
        """One key and one value scale per layer (the maximum over KV heads), exactly as the
        ``kv_scale: tensor`` cache applies them: what an engine loads as ``k_scale`` / ``v_scale``."""
        pairs = [self.scales(i, fmt, "tensor") for i in range(len(self.keys))]
        return {"format": fmt, "k": [float(k.item()) for k, _ in pairs], "v": [float(v.item()) for _, v in pairs]}

    def to_json(self) -> dict:
        return {"keys": self.keys, "values": self.values, "meta": self.meta}


def unit_kv_amax(n_layers: int, n_kv_heads: int, fmt: str) -> KvAmax:
    """Scale 1.0 on every layer and head (``kv_scales: unit``): what vLLM and SGLang use for
    an FP8 KV cache when the checkpoint ships no ``k_scale`` / ``v_scale``."""
    amax = [[FP8_MAX[fmt]] * n_kv_heads for _ in range(n_layers)]
    return KvAmax(amax, [row[:] for row in amax], "unit", None, {"scale": 1.0})


class _AmaxRecorder(DynamicCache):
    """A cache that records per-head |K| and |V| maxima of the positions ``mask`` marks real."""

    def __init__(self) -> None:
        super().__init__()
        self.mask: torch.Tensor | None = None  # [B, S_total] 1 on real tokens
        self.k_amax: dict[int, torch.Tensor] = {}
        self.v_amax: dict[int, torch.Tensor] = {}

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        s = key_states.shape[2]
        real = self.mask[:, -s:].to(key_states.device)[:, None, :, None].float()  # [B, 1, S, 1]
        for states, store in ((key_states, self.k_amax), (value_states, self.v_amax)):
            amax = (states.detach().float().abs() * real).amax(dim=(0, 2, 3))
            store[layer_idx] = torch.maximum(store[layer_idx], amax) if layer_idx in store else amax
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


@torch.no_grad()
def calibrate_kv_amax(model: nn.Module, prompt_ids: Sequence[Sequence[int]], eos_id: int | None, pad_id: int,
                      new_tokens: int = CALIBRATION_NEW_TOKENS, batch_size: int = 64) -> tuple[list, list]:
    """Greedy decodes of ``prompt_ids`` by ``model``; per layer and KV head, the largest |K|
    and |V| that entered the cache at a real position (padding and finished rows excluded)."""
    from .sampling import left_pad, positions

    device = next(model.parameters()).device
    n_layers = int(model.config.num_hidden_layers)
    k_all: dict[int, torch.Tensor] = {}
    v_all: dict[int, torch.Tensor] = {}
    for start in range(0, len(prompt_ids), batch_size):
        batch = prompt_ids[start : start + batch_size]
        ids, attn = left_pad(batch, pad_id, device)
        rec = _AmaxRecorder()
        done = torch.zeros(len(batch), dtype=torch.bool, device=device)
        inp, pos = ids, positions(attn)
        for _ in range(new_tokens):
            rec.mask = attn
            logits = model(input_ids=inp, attention_mask=attn, position_ids=pos, past_key_values=rec,
                           use_cache=True, logits_to_keep=1).logits
            nxt = logits[:, -1, :].argmax(-1)
            alive = ~done
            if eos_id is not None:
                done = done | (nxt == eos_id)
            if bool(done.all()):
                break
            inp = torch.where(alive, nxt, torch.full_like(nxt, pad_id))[:, None]
            attn = torch.cat([attn, alive.long()[:, None]], dim=1)
            pos = pos[:, -1:] + 1
        for store, rec_store in ((k_all, rec.k_amax), (v_all, rec.v_amax)):
            for i, a in rec_store.items():
                store[i] = torch.maximum(store[i], a) if i in store else a
    keys = [k_all[i].cpu().tolist() for i in range(n_layers)]
    values = [v_all[i].cpu().tolist() for i in range(n_layers)]
    return keys, values


def checkpoint_kv_amax(model_dir: str | Path, n_layers: int) -> KvAmax | None:
    """K/V scales stored in the checkpoint's safetensors (vLLM's names), as amax; None if absent."""
    d = Path(model_dir)
    if not d.is_dir():
        return None
    from safetensors import safe_open

    found: dict[str, torch.Tensor] = {}
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            for key in fh.keys():
                if key.endswith((".k_scale", ".v_scale", "k_proj.output_scale", "v_proj.output_scale")):
                    found[key] = fh.get_tensor(key).float()
    if not found:
        return None
    keys, values = [], []
    for i in range(n_layers):
        pair = []
        for kv in ("k", "v"):
            names = [f"model.layers.{i}.self_attn.{kv}_scale", f"model.layers.{i}.self_attn.{kv}_proj.output_scale"]
            t = next((found[n] for n in names if n in found), None)
            if t is None:
                return None  # partial scales: do not guess the rest
            pair.append((t.reshape(-1) * FP8_MAX[CHECKPOINT_SCALE_FORMAT]).tolist())
        keys.append(pair[0])
        values.append(pair[1])
    return KvAmax(keys, values, "checkpoint", str(d), {"format": CHECKPOINT_SCALE_FORMAT})


def calibration_key(model_dir: str | Path, prompt_ids: Sequence[Sequence[int]], new_tokens: int) -> str:
    return digest_of({
        "what": "kv-amax", "version": MEASUREMENT_VERSION, "checkpoint": checkpoint_digest(model_dir) or str(model_dir),
        "prompts": token_ids_digest(prompt_ids), "new_tokens": new_tokens, "calibration_dtype": "bf16",
    })


def store_dirs(model_dir: str | Path, cache_dir: str | Path | None) -> list[Path]:
    """Where a calibration is looked for and stored: the product's cache dir, else beside the checkpoint."""
    dirs = [Path(cache_dir) / "kv-scales"] if cache_dir else []
    if Path(model_dir).is_dir():
        dirs.append(Path(model_dir) / STORE_DIR_BESIDE_CHECKPOINT)
    return dirs


_MEMO: dict[str, KvAmax] = {}


def static_kv_amax(model_dir: str, base_model: nn.Module, prompt_ids: Sequence[Sequence[int]],
                   eos_id: int | None, pad_id: int, cache_dir: str | Path | None = None,
                   new_tokens: int = CALIBRATION_NEW_TOKENS) -> KvAmax:
    """The static KV amax of ``model_dir``: from the checkpoint, a stored calibration, or a
    calibration run on a BF16 copy of ``base_model`` (the unperturbed checkpoint) that is
    then stored.  Never depends on the batch being measured."""
    n_layers = int(base_model.config.num_hidden_layers)
    from_ckpt = checkpoint_kv_amax(model_dir, n_layers)
    if from_ckpt is not None:
        return from_ckpt
    key = calibration_key(model_dir, prompt_ids, new_tokens)
    if key in _MEMO:
        return _MEMO[key]
    name = f"kv-amax-{key}.json"
    dirs = store_dirs(model_dir, cache_dir)
    for d in dirs:
        f = d / name
        if f.is_file():
            try:
                data = json.loads(f.read_text())
                amax = KvAmax(data["keys"], data["values"], "stored calibration", str(f), data.get("meta", {}))
            except (OSError, ValueError, KeyError):
                continue
            _MEMO[key] = amax
            return amax
    calib = copy.deepcopy(base_model).to(torch.bfloat16).eval()
    keys, values = calibrate_kv_amax(calib, prompt_ids, eos_id, pad_id, new_tokens)
    del calib
    meta = {"prompts": len(prompt_ids), "new_tokens": new_tokens, "key": key, "dtype": "bf16"}
    amax = KvAmax(keys, values, "calibrated", None, meta)
    text = json.dumps(amax.to_json())
    for d in dirs:
        try:
            write_atomically(d / name, lambda tmp: tmp.write_text(text))
            amax.path = str(d / name)
            break
        except OSError:
            continue  # a read-only checkpoint directory: try the next place, else keep it in memory
    _MEMO[key] = amax
    return amax


def calibration_prompt_ids(model_dir: str, tokenizer, task: str | None = None) -> list[list[int]]:
    """The calibration prompts of a checkpoint: its arithmetic or GSM8K task's *training* split
    (never the held-out prompts a measurement samples), or a JSONL task's calibration split
    (:func:`calibration_split`)."""
    from ...prompts import (
        GSM8K_TASKS,
        arithmetic_prompt_set,
        encode_prompts,
        gsm8k_prompt_set,
        load_jsonl_prompt_set,
        model_task,
    )

    if task in (None, "auto"):
        toy = model_task(model_dir)
        task = toy["task"] if toy else "arithmetic:3"
    if task == "arithmetic" or task.startswith("arithmetic:"):
        level = int(task.split(":", 1)[1]) if ":" in task else 3
        ps = arithmetic_prompt_set(CALIBRATION_PROMPTS, level=level, seed=0, split="train")
    elif task in GSM8K_TASKS:
        ps = gsm8k_prompt_set("train", limit=CALIBRATION_PROMPTS)  # never the test split a check measures
    else:
        ps = load_jsonl_prompt_set(calibration_split(task), limit=CALIBRATION_PROMPTS)
    return encode_prompts(tokenizer, ps.prompts(), ps.chat)


def calibration_split(task_file: str | Path) -> Path:
    """The held-out calibration file of a JSONL task: ``<name>.calibration.jsonl`` beside it,
    never the file a measurement samples (scales fitted on the measured prompts would flatter
    the very multiple they are judged by).  It must be a file in the task file's own folder
    (a link out of it is refused: the folder is what the sandbox admitted)."""
    task = Path(task_file)
    split = task.with_name(f"{task.name.removesuffix('.jsonl')}.calibration.jsonl")
    if not split.is_file():
        raise ConfigError(f"calibrated FP8 KV scales on task {task.name!r} need a calibration split the measurement "
                          f"never samples: put {split.name} beside it (the same JSONL format), or measure with "
                          "kv_scales: unit")
    if split.resolve().parent != task.resolve().parent:
        raise ConfigError(f"{split.name} leads out of the task's folder; copy the file there instead of linking it")
    return split
