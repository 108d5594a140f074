"""The one canonical form of a rollout config, and its content hash.

A config is validated by :class:`workers.science.config.RolloutConfig` and dumped with
every default filled in, so two spellings of the same engine (defaults written out or
left out, ``bfloat16`` or ``bf16``, keys in any order) have one canonical form and one
hash: sha256 of its JSON with sorted keys and no spaces.  Fields added to the schema after
configs were first hashed (:data:`HASHED_WHEN_SET`) enter the hash only when they differ
from their default, so every config hashed before they existed keeps its hash (and the
approvals that name it stay current).  The schema folds dtype aliases
itself (``RolloutConfig``'s validators), so the command line accepts the same spellings.
"""
from __future__ import annotations

import hashlib
import json

from pydantic import ValidationError

from workers.science.config import RolloutConfig


def canonical_rollout(data: dict) -> dict:
    """The validated config with defaults filled in, as JSON values; raises pydantic's
    ``ValidationError`` for an invalid one."""
    return RolloutConfig.model_validate(data).model_dump(mode="json")


#: The fields added after the first hashes, each at its default (in the canonical JSON form).
HASHED_WHEN_SET: dict[str, object] = {
    name: value for name, value in RolloutConfig().model_dump(mode="json").items()
    if name in ("kv_scales", "correction", "targets")
}


def config_hash(canonical: dict) -> str:
    """sha256 of the canonical JSON (sorted keys, no whitespace), the fields of
    :data:`HASHED_WHEN_SET` left out where they hold their default."""
    hashed = {k: v for k, v in canonical.items() if not (k in HASHED_WHEN_SET and v == HASHED_WHEN_SET[k])}
    text = json.dumps(hashed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def hash_of_rollout(data) -> str | None:
    """The hash of a job config's ``rollout`` part, or None when it is not a valid config."""
    if not isinstance(data, dict):
        return None
    try:
        return config_hash(canonical_rollout(data))
    except ValidationError:
        return None


__all__ = ["HASHED_WHEN_SET", "ValidationError", "canonical_rollout", "config_hash", "hash_of_rollout"]
