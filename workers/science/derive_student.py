"""``python -m workers derive-student``: a student made from a teacher by keeping some of its
decoder layers, so the pair shares the tokenizer, the chat template and the task (what OPD
needs) and the student has accuracy to win back from the teacher.

The kept layers keep their weights exactly and are renumbered in order; the embeddings,
the final norm and the head are the teacher's.  Per-layer lists in ``config.json``
(``layer_types``) keep the kept layers' entries.  The folder is written beside its
destination and renamed into place; ``opdweb_derived.json`` records the teacher's content
hash and the layers kept.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from .atomic_files import write_folder_atomically
from .config import ConfigError
from .fingerprint import checkpoint_digest

DERIVED_RECORD = "opdweb_derived.json"
WEIGHT_FILE = "model.safetensors"
#: Per-layer lists of a config, shortened to the kept layers.
PER_LAYER_KEYS = ("layer_types",)
LAYER_KEY = re.compile(r"^(model\.layers\.)(\d+)(\..+)$")


def kept_layers(n_layers: int, keep: str) -> list[int]:
    """``keep``: ``every:K`` (layers 0, K, 2K, ... and the last) or a comma list of indices."""
    if keep.startswith("every:"):
        try:
            step = int(keep.removeprefix("every:"))
        except ValueError:
            raise ConfigError(f"keep {keep!r}: every:K takes a whole number K") from None
        if step < 1:
            raise ConfigError(f"keep {keep!r}: K must be at least 1")
        layers = sorted(set(range(0, n_layers, step)) | {n_layers - 1})
    else:
        try:
            layers = sorted({int(part) for part in keep.split(",") if part.strip()})
        except ValueError:
            raise ConfigError(f"keep {keep!r}: a comma-separated list of layer indices, or every:K") from None
    if not layers:
        raise ConfigError("keep names no layer")
    outside = [i for i in layers if not 0 <= i < n_layers]
    if outside:
        raise ConfigError(f"keep names layer {outside[0]}; the teacher has layers 0 to {n_layers - 1}")
    if len(layers) == n_layers:
        raise ConfigError(f"keep names all {n_layers} layers: the student would be the teacher")
    return layers


def derive_student(teacher: str | Path, out: str | Path, keep: str = "every:2", force: bool = False) -> dict:
    """Write the student folder ``out`` from the checkpoint folder ``teacher``; returns its record."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    source, target = Path(teacher), Path(out)
    weights = source / WEIGHT_FILE
    if not (source / "config.json").is_file() or not weights.is_file():
        raise ConfigError(f"teacher {str(source)!r} is not a checkpoint folder with config.json and {WEIGHT_FILE} "
                          "(a sharded checkpoint is not supported here)")
    if target.exists() and not force:
        raise ConfigError(f"{target} exists; pass --force to replace it")
    config = json.loads((source / "config.json").read_text())
    n_layers = int(config.get("num_hidden_layers", 0))
    layers = kept_layers(n_layers, keep)
    renumber = {old: new for new, old in enumerate(layers)}
    tensors = {}
    with safe_open(str(weights), framework="pt") as f:
        metadata = f.metadata()
        for name in f.keys():
            match = LAYER_KEY.match(name)
            if match is None:
                tensors[name] = f.get_tensor(name)
            elif int(match.group(2)) in renumber:
                tensors[f"{match.group(1)}{renumber[int(match.group(2))]}{match.group(3)}"] = f.get_tensor(name)
    config["num_hidden_layers"] = len(layers)
    for key in PER_LAYER_KEYS:
        if isinstance(config.get(key), list) and len(config[key]) == n_layers:
            config[key] = [config[key][i] for i in layers]

    def write(work: Path) -> dict:
        for path in source.iterdir():  # the tokenizer, chat template, generation config, task
            if path.is_file() and path.name not in (WEIGHT_FILE, "config.json", DERIVED_RECORD) \
                    and not path.name.endswith(".safetensors"):
                shutil.copy2(path, work / path.name)
        save_file(tensors, str(work / WEIGHT_FILE), metadata=metadata or {"format": "pt"})
        (work / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        record = {"teacher": str(source), "teacher_hash": checkpoint_digest(source), "teacher_layers": n_layers,
                  "kept_layers": layers, "keep": keep}
        (work / DERIVED_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        return record

    record = write_folder_atomically(target, write)
    record["checkpoint_hash"] = checkpoint_digest(target)
    return record


__all__ = ["DERIVED_RECORD", "derive_student", "kept_layers"]
