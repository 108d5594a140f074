"""The canonical config itself as YAML, for any other tool."""
from __future__ import annotations

import yaml

from opdweb.exports.base import Provenance
from workers.science.checkpoint_facts import CheckpointFacts
from workers.science.config import RolloutConfig


def plain_yaml(config: RolloutConfig, provenance: Provenance, facts: CheckpointFacts) -> str:
    """The canonical config itself, with its provenance."""
    document = {"opdweb": provenance.fields(), "rollout": config.model_dump(mode="json")}
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
