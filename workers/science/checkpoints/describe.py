"""The ``describe`` job: what a checkpoint is, read on a worker so the web process never
opens a weight file.  It fetches the checkpoint its reference names (a local path under the
model roots, or an ``s3://`` prefix, into the worker's cache) and reports its content
digest, its tokenizer's, the facts the exports rely on and what would stop a job loading it.
The product stores the answer and compares digests only."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..checkpoint_facts import read_checkpoint_facts
from ..fingerprint import TOKENIZER_GLOBS, checkpoint_digest, checkpoint_digest_with_trainer_state, tokenizer_digest
from ..gguf_import import IMPORT_RECORD
from ..reporting import Reporter


class DescribeConfig(BaseModel):
    """Reads a checkpoint on a worker: its content digest and what the exports need to know."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(..., max_length=1000, json_schema_extra={"sandbox": "model"},
                       description="a checkpoint folder under the model roots, or s3://bucket/prefix")


class CheckpointFactsRecord(BaseModel):
    architecture: str | None = None
    n_layers: int | None = None
    has_kv_scales: bool = False
    weight_index: bool = False


class CheckpointDescription(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str  # the reference as the config named it (the URI, never a worker's cache path)
    digest: str = Field(..., min_length=64, max_length=64)  # of the weights and config files
    # The digest with the trainer state files, as hashes stored before December 2026 have it
    # (the digest itself when there are none); None from a worker of before.
    digest_with_trainer_state: str | None = Field(None, min_length=64, max_length=64)
    tokenizer_digest: str | None = None
    facts: CheckpointFactsRecord
    files: int
    bytes: int
    problems: list[str] = Field(default_factory=list)  # why a job could not load it; empty when it can
    import_note: str = ""  # what an imported checkpoint's weights went through ("dequantized from GGUF ...")
    config_json: dict = Field(default_factory=dict)  # config.json as read (the attention geometry)


def describe_folder(model: str, folder: Path) -> CheckpointDescription:
    """The description of the checkpoint folder ``folder``, named ``model`` in the result."""
    digest = checkpoint_digest(folder)
    if digest is None:
        raise FileNotFoundError(f"{model}: not a checkpoint folder")
    files = [f for f in folder.rglob("*") if f.is_file() and not f.name.startswith(".")]
    problems = []
    if not (folder / "config.json").is_file():
        problems.append(f"model: {model!r} has no config.json; expected a Hugging Face checkpoint folder")
    if not any(f.is_file() for pattern in TOKENIZER_GLOBS for f in folder.glob(pattern)):
        problems.append(f"model: {model!r} has no tokenizer files (tokenizer.json, vocab.*, *.model)")
    facts = asdict(read_checkpoint_facts(folder))
    facts.pop("shipped_kv_scales")
    return CheckpointDescription(model=model, digest=digest,
                                 digest_with_trainer_state=checkpoint_digest_with_trainer_state(folder),
                                 tokenizer_digest=tokenizer_digest(folder),
                                 facts=CheckpointFactsRecord(**facts), files=len(files),
                                 bytes=sum(f.stat().st_size for f in files), problems=problems,
                                 import_note=import_note(folder), config_json=_config_json(folder))


def _config_json(folder: Path) -> dict:
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def import_note(folder: Path) -> str:
    """The note of an imported checkpoint's record (``opdweb_import.json``); "" for others."""
    try:
        record = json.loads((folder / IMPORT_RECORD).read_text())
    except (OSError, ValueError):
        return ""
    note = record.get("note") if isinstance(record, dict) else None
    return note[:2000] if isinstance(note, str) else ""


def run_describe(config: DescribeConfig, reporter: Reporter) -> CheckpointDescription:
    """The worker has put the checkpoint on local disk by now (``config.model`` is its
    folder); the result names it as the submitter did."""
    reporter.progress(0.0, "hashing the checkpoint")
    described = describe_folder(config.model, Path(config.model))
    reporter.progress(1.0, f"{described.files} files, digest {described.digest[:12]}")
    return described
