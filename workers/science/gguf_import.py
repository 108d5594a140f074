"""``python -m workers import-gguf``: a GGUF checkpoint made into an ordinary checkpoint folder
(safetensors weights, config.json, the tokenizer with its chat template) that every engine
here loads, with a record of where it came from.

transformers reads the GGUF (``from_pretrained(dir, gguf_file=...)``, the ``gguf`` package)
and dequantizes it to a plain model; ``save_pretrained`` refuses a GGUF-loaded model, so the
weights move to a model built from its config without the quantization entry, saved in
float32 (the dequantized values exactly).  The folder is written beside its destination and
renamed into place, so a cut-short import leaves nothing that looks like a checkpoint.  The
record (``opdweb_import.json``) keeps the source file's sha256, its quantization (the weights
went through it before the product sees them: the pages say so) and the largest logit
difference between the folder and the GGUF-loaded model on a few prompts.
"""
from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

from .atomic_files import write_folder_atomically
from .config import ConfigError
from .fingerprint import checkpoint_digest
from .prompts import TASK_FILE

GGUF_MAGIC = b"GGUF"
#: GGUF architectures whose checkpoints the product names modules for: the Llama family and
#: Gemma 3 (text), whose decoder linears carry the same names (``module_names.DECODER_LINEARS``).
SUPPORTED_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM",
                           "gemma3": "Gemma3ForCausalLM"}
IMPORT_RECORD = "opdweb_import.json"
CHECK_PROMPTS = ("The capital of France is", "Natalia sold clips to 48 of her friends in April,",
                 "def fibonacci(n):", "2 + 3 =")
#: llama.cpp's file types (``general.file_type``), for the record.
GGUF_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
                   11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
                   17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _field(reader, key: str):
    """A scalar GGUF metadata value (a string decoded), or None when the file has no such key."""
    field = reader.fields.get(key)
    if field is None or not field.data:
        return None
    value = field.parts[field.data[0]]
    return bytes(value).decode() if field.types and field.types[0].name == "STRING" else value[0].item()


def gguf_header(path: Path) -> dict:
    """The architecture, file type, licence and BOS rule a GGUF file declares; a
    :class:`ConfigError` for a file that is missing, not GGUF, cut short or of an architecture
    the product cannot name."""
    if not path.is_file():
        raise ConfigError(f"GGUF file {str(path)!r} does not exist")
    with path.open("rb") as f:
        head = f.read(8)
    if len(head) < 8 or head[:4] != GGUF_MAGIC:
        raise ConfigError(f"{path}: not a GGUF file (it does not start with 'GGUF')")
    (version,) = struct.unpack("<I", head[4:8])
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        architecture = _field(reader, "general.architecture")
        if architecture is None:
            raise KeyError("general.architecture")
        file_type = _field(reader, "general.file_type")
        licence = _field(reader, "general.license")
        add_bos = _field(reader, "tokenizer.ggml.add_bos_token")
    except (ValueError, KeyError, IndexError, OSError, struct.error) as exc:
        raise ConfigError(f"{path}: the GGUF file cannot be read (truncated or corrupt?): {exc}") from None
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise ConfigError(f"{path}: GGUF architecture {architecture!r} is not one the product names modules for "
                          f"({', '.join(sorted(SUPPORTED_ARCHITECTURES))})")
    return {"architecture": architecture, "version": version,
            "file_type": GGUF_FILE_TYPES.get(file_type, str(file_type)) if file_type is not None else None,
            "license": licence, "add_bos_token": bool(add_bos)}


def _with_bos(tokenizer, wanted: bool):
    """transformers' GGUF tokenizer ignores ``tokenizer.ggml.add_bos_token``: Gemma's asks for
    BOS, and without it the model's text degenerates ("The capital of France is France. The
    The The"). Set it so the saved tokenizer prepends BOS as llama.cpp does."""
    if wanted and tokenizer.bos_token_id is not None and tokenizer("x").input_ids[:1] != [tokenizer.bos_token_id]:
        tokenizer.add_bos_token = True
    return tokenizer


def _logits(model, tokenizer):
    import torch

    with torch.no_grad():
        return [model(**tokenizer(p, return_tensors="pt")).logits[0] for p in CHECK_PROMPTS]


def import_gguf(gguf_path: str | Path, out: str | Path, *, name: str | None = None, force: bool = False,
                task: dict | None = None) -> dict:
    """Write the checkpoint folder ``out`` from the GGUF file; returns its import record.
    ``task``: what ``opdweb_task.json`` says the model is measured on (``task: auto``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source, target = Path(gguf_path).resolve(), Path(out).resolve()
    header = gguf_header(source)
    if target.exists() and not force:
        raise ConfigError(f"{target} exists; pass --force to replace it")
    try:
        loaded = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
        tokenizer = _with_bos(AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name),
                              header["add_bos_token"])
    except (ValueError, OSError, KeyError, RuntimeError) as exc:
        raise ConfigError(f"{source}: transformers cannot load this GGUF file: {exc}") from None
    config = loaded.config
    config.quantization_config = None
    del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    if [k for k in missing if k != "lm_head.weight"] or unexpected:
        raise ConfigError(f"{source}: the dequantized weights do not fit the model (missing {missing[:3]}, "
                          f"unexpected {unexpected[:3]})")
    plain.tie_weights()
    plain.eval()

    def write(work: Path) -> dict:
        plain.save_pretrained(str(work), safe_serialization=True)
        tokenizer.save_pretrained(str(work))
        saved = AutoModelForCausalLM.from_pretrained(str(work), dtype=torch.float32).eval()
        reference = _logits(loaded.eval(), tokenizer)
        diff = max(float((a - b).abs().max()) for a, b in zip(_logits(saved, tokenizer), reference, strict=True))
        record = {
            "name": name or source.stem,
            "source": {"file": source.name, "sha256": sha256_file(source), "bytes": source.stat().st_size,
                       **header},
            "architecture": SUPPORTED_ARCHITECTURES[header["architecture"]],
            "layers": int(config.num_hidden_layers),
            "dtype": "fp32",
            "note": (f"dequantized from GGUF {header['file_type'] or ''}: these weights went through that "
                     "quantization before the product saw them").replace("  ", " "),
            "logits_max_abs_diff": diff,
            "check_prompts": list(CHECK_PROMPTS),
        }
        (work / IMPORT_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        if task:
            (work / TASK_FILE).write_text(json.dumps(task) + "\n")
        return record

    record = write_folder_atomically(target, write)
    record["checkpoint_hash"] = checkpoint_digest(target)
    return record


__all__ = ["IMPORT_RECORD", "SUPPORTED_ARCHITECTURES", "gguf_header", "import_gguf"]
