"""What the approval tests need: a checkpoint under the model roots, a mismatch budget of
it, and admission jobs as the admission kind records them."""
from __future__ import annotations

from pathlib import Path

from opdweb.budgets.models import MismatchBudget
from tests.web.factories import JobFactory
from tests.web.results import admission_result
from workers.science.fingerprint import checkpoint_digest


def make_checkpoint(root: Path, name: str = "student") -> str:
    """A checkpoint directory (config.json and a weights file) under ``root``."""
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text('{"model_type": "qwen2"}')
    (path / "model.safetensors").write_bytes(b"weights v1")
    return str(path.resolve())


def make_loadable_checkpoint(root: Path, name: str) -> Path:
    """A checkpoint directory as workers load it: config.json, a tokenizer and weights."""
    path = root / name
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "qwen2"}')
    (path / "tokenizer.json").write_text('{"model": {}}')
    (path / "model.safetensors").write_bytes(f"weights of {name}".encode())
    return path.resolve()


def make_budget(team, checkpoint: str, value: float | None = 50.0, curve: list | None = None):
    return MismatchBudget.objects.create(
        team=team, checkpoint=checkpoint, checkpoint_hash=checkpoint_digest(checkpoint), task="arithmetic:3",
        method="opd", metric="k3", unit_engine="hf", tolerance=1.4, curve=curve or [], baseline={}, budget=value,
        status="reached" if value is not None else "not_reached", rule="within 1.4 points of BF16")


def recalibrate(budget):
    """A newer calibration of the same checkpoint supersedes ``budget``."""
    newer = make_budget(budget.team, budget.checkpoint, value=20.0)
    budget.superseded_by = newer
    budget.save(update_fields=["superseded_by"])
    return newer


def admission_job(team, checkpoint: str, rollout: dict, budget, verdict: str = "pass", multiple: float = 3.2,
                  **result):
    """A succeeded admission job as the product stores one: the budget's spec in the config
    (the submitted id resolved) and in the result (``result``: more of it, e.g. ``engine``)."""
    return JobFactory(team=team, kind="admission", state="succeeded",
                      config={"model": checkpoint, "rollout": rollout, "budget": budget.spec()},
                      result=admission_result(verdict, multiple, budget=budget.spec(), rollout=rollout,
                                              model=checkpoint,
                                              checkpoint_hash=checkpoint_digest(checkpoint), **result))
