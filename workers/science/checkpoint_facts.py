"""What a checkpoint directory says about itself, read without torch or its weights: the
architecture and layer count from ``config.json``, and whether its safetensors carry FP8
KV-cache scales (vLLM's ``k_scale`` / ``v_scale`` names), from the files' JSON headers.

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


@dataclass(frozen=True)
class CheckpointFacts:
    architecture: str | None
    n_layers: int | None
    has_kv_scales: bool


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
    return CheckpointFacts(architectures[0], int(layers) if layers is not None else None,
                           any(n.endswith(KV_SCALE_SUFFIXES) for n in names))


__all__ = ["CheckpointFacts", "KV_SCALE_SUFFIXES", "read_checkpoint_facts", "safetensors_names"]
