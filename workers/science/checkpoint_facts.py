"""What a checkpoint directory says about itself, read without torch or its weights: the
architecture and layer count from ``config.json``, and whether it ships FP8 KV-cache scales
an engine loads: ``k_scale`` / ``v_scale`` tensors (vLLM's names, from the safetensors'
JSON headers) *and* a ``quantization_config`` that gives attention a KV-cache method (a
compressed-tensors ``kv_cache_scheme``, or a serialized FP8 / ModelOpt checkpoint): vLLM
leaves the scales of any other checkpoint at 1.0.

The exports use it in the web process to say what a trainer's engine will build from a
checkpoint (which modules keep BF16, whether the KV scales come from the checkpoint or are
1.0) without loading the model."""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

#: The tensor-name endings vLLM (and :func:`.engines.hf.kv_scales.checkpoint_kv_amax`) read as KV scales.
KV_SCALE_SUFFIXES = (".k_scale", ".v_scale", "k_proj.output_scale", "v_proj.output_scale")
_MAX_HEADER_BYTES = 100 * 1024 * 1024


#: ``quantization_config.quant_method`` values whose vLLM config loads checkpoint KV scales.
KV_SCALE_METHODS = ("fp8", "modelopt", "modelopt_fp4")


@dataclass(frozen=True)
class CheckpointFacts:
    architecture: str | None
    n_layers: int | None
    has_kv_scales: bool  # scales an engine loads from the checkpoint itself
    #: the export ships a scale file for this checkpoint (the admission check's scales,
    #: :mod:`.kv_scale_artifact`) that the target may place beside it
    shipped_kv_scales: bool = False
    weight_index: bool = False  # model.safetensors.index.json: only the files it names are loaded


def declares_kv_scheme(config: dict) -> bool:
    """Whether ``config.json``'s quantization_config makes vLLM load k_scale / v_scale."""
    quant = config.get("quantization_config") or (config.get("text_config") or {}).get("quantization_config") or {}
    if not isinstance(quant, dict):
        return False
    if quant.get("quant_method") == "compressed-tensors":
        return bool(quant.get("kv_cache_scheme"))
    return quant.get("quant_method") in KV_SCALE_METHODS


def safetensors_names(path: Path) -> list[str]:
    """The tensor names in one safetensors file's header (8-byte length, then JSON); none
    for a file that has no readable header.  Only the KV-scale question reads them, and
    "no scales" can only make an export refuse, never accept what it should not."""
    try:
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > _MAX_HEADER_BYTES:
                return []
            header = json.loads(f.read(length))
    except (OSError, struct.error, ValueError):
        return []
    return [name for name in header if name != "__metadata__"] if isinstance(header, dict) else []


def read_checkpoint_facts(model_dir: str | Path) -> CheckpointFacts:
    """The facts of a local checkpoint directory; all unknown (None / False) for a hub id or
    a directory without ``config.json``."""
    d = Path(model_dir)
    config_file = d / "config.json"
    if not config_file.is_file():
        return CheckpointFacts(None, None, False)
    config = json.loads(config_file.read_text())
    architectures = config.get("architectures") or [None]
    layers = config.get("text_config", config).get("num_hidden_layers")
    names = [n for f in sorted(d.glob("*.safetensors")) for n in safetensors_names(f)]
    has_scales = any(n.endswith(KV_SCALE_SUFFIXES) for n in names) and declares_kv_scheme(config)
    return CheckpointFacts(architectures[0], int(layers) if layers is not None else None, has_scales,
                           weight_index=(d / "model.safetensors.index.json").is_file())


__all__ = ["CheckpointFacts", "KV_SCALE_METHODS", "KV_SCALE_SUFFIXES", "declares_kv_scheme", "read_checkpoint_facts",
           "safetensors_names"]
