"""Staleness: the weights of k optimizer steps ago, from a ring of snapshots.

A training run keeps its last few states in a :class:`SnapshotRing` and saves it next to
the checkpoint (``snapshots/index.json`` + one safetensors file per step); a rollout config
with ``staleness: k`` loads the state of k steps before the checkpoint.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from ...config import ConfigError

SNAPSHOT_DIR = "snapshots"


class SnapshotRing:
    """The weights of the last ``capacity`` optimizer steps, newest last (in memory)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: list[tuple[int, dict[str, torch.Tensor]]] = []

    def push(self, step: int, state: dict[str, torch.Tensor]) -> None:
        self._items.append((step, {k: v.detach().to("cpu", copy=True) for k, v in state.items()}))
        del self._items[: max(0, len(self._items) - self.capacity)]

    def __len__(self) -> int:
        return len(self._items)

    def save(self, directory: Path) -> None:
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        steps = []
        for step, state in self._items:
            save_file({k: v.contiguous() for k, v in state.items()}, str(directory / f"step_{step:06d}.safetensors"))
            steps.append(step)
        (directory / "index.json").write_text(json.dumps({"steps": steps}))


def stale_snapshot_path(model_dir: str, k: int) -> Path:
    """The snapshot file of ``k`` steps before the checkpoint; refuses a missing or short ring."""
    index = Path(model_dir) / SNAPSHOT_DIR / "index.json"
    if not index.is_file():
        raise ConfigError(
            f"staleness {k} needs weight snapshots, but {model_dir!r} has no {SNAPSHOT_DIR}/index.json "
            "(build-toy-models writes one; a training run's snapshot ring can be saved with SnapshotRing.save)"
        )
    steps = json.loads(index.read_text())["steps"]
    if k >= len(steps):
        raise ConfigError(f"staleness {k} is beyond the snapshot ring of {model_dir!r} ({len(steps)} snapshots, "
                          f"max staleness {len(steps) - 1})")
    return Path(model_dir) / SNAPSHOT_DIR / f"step_{steps[-1 - k]:06d}.safetensors"


def load_stale_state(model_dir: str, k: int) -> dict[str, torch.Tensor]:
    """The state dict of ``k`` optimizer steps before the checkpoint, from ``snapshots/``."""
    from safetensors.torch import load_file

    return load_file(str(stale_snapshot_path(model_dir, k)))


def apply_staleness(model: nn.Module, model_dir: str, k: int) -> None:
    """Load the weights of ``k`` steps ago into ``model`` (rotary buffers are not saved)."""
    state = load_stale_state(model_dir, k)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [key for key in missing if "rotary" not in key]:
        raise ConfigError(f"snapshot of {model_dir!r} does not match the model (missing {missing[:3]}, "
                          f"unexpected {unexpected[:3]})")
