"""The canonical config itself as YAML, for any other tool."""
from __future__ import annotations

from dataclasses import asdict

import yaml

from opdweb.exports.base import Provenance, notes


def plain_yaml(config: dict, provenance: Provenance) -> str:
    """The canonical config itself, with its provenance."""
    document = {"opdweb": {**asdict(provenance), "notes": notes(config, "yaml")}, "rollout": config}
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
