"""The one canonical form of a rollout config, and its content hash.

A config is validated by :class:`workers.science.config.RolloutConfig` and dumped with
every default filled in, so two spellings of the same engine (defaults written out or
left out, ``bfloat16`` or ``bf16``, keys in any order) have one canonical form and one
hash: sha256 of its JSON with sorted keys and no spaces.
"""
from __future__ import annotations

import hashlib
import json

from pydantic import ValidationError

from workers.science.config import RolloutConfig

#: The names people write for the schema's dtype names (torch's and vLLM's spellings).
DTYPE_ALIASES = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16", "half": "fp16", "float": "fp32"}
#: The fields whose values are dtype names.
DTYPE_FIELDS = ("dtype", "weights")


def with_dtype_aliases_resolved(data: dict) -> dict:
    """``data`` with each aliased dtype name replaced by the schema's spelling."""
    out = dict(data)
    for name in DTYPE_FIELDS:
        value = out.get(name)
        if isinstance(value, str) and value.strip().lower() in DTYPE_ALIASES:
            out[name] = DTYPE_ALIASES[value.strip().lower()]
    return out


def canonical_rollout(data: dict) -> dict:
    """The validated config with defaults filled in, as JSON values; raises pydantic's
    ``ValidationError`` for an invalid one."""
    return RolloutConfig.model_validate(with_dtype_aliases_resolved(data)).model_dump(mode="json")


def config_hash(canonical: dict) -> str:
    """sha256 of the canonical JSON (sorted keys, no whitespace)."""
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def hash_of_rollout(data) -> str | None:
    """The hash of a job config's ``rollout`` part, or None when it is not a valid config."""
    if not isinstance(data, dict):
        return None
    try:
        return config_hash(canonical_rollout(data))
    except ValidationError:
        return None


__all__ = ["ValidationError", "canonical_rollout", "config_hash", "hash_of_rollout", "with_dtype_aliases_resolved"]
