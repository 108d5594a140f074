"""What the approval tests need: a checkpoint under the model roots, a mismatch budget of
it, and admission jobs as the admission kind records them."""
from __future__ import annotations

from pathlib import Path

from opdweb.budgets.models import MismatchBudget
from opdweb.registry.descriptions import store as store_description
from tests.web.factories import JobFactory
from tests.web.results import admission_result
from workers.science.checkpoints.describe import describe_folder
from workers.science.fingerprint import checkpoint_digest


def make_checkpoint(root: Path, name: str = "student") -> str:
    """A checkpoint directory (config.json and a weights file) under ``root``, read by a
    worker's describe job (:func:`read_by_worker`) as registering it does."""
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text('{"model_type": "qwen2"}')
    (path / "model.safetensors").write_bytes(b"weights v1")
    read_by_worker(str(path.resolve()))
    return str(path.resolve())


def read_by_worker(checkpoint: str):
    """What a worker's describe job of ``checkpoint`` stores: the science's own description
    of the folder, kept by the product's own receiver (the real worker path is walked in
    tests/web/test_checkpoint_references.py)."""
    return store_description(describe_folder(checkpoint, Path(checkpoint)))


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


def worker_runs(job):
    """What a worker does with a queued local-checkpoint job (a describe job of a path): claim
    it, run its kind's entry point on its config, record the outcome (the receivers store what
    it read).  Celery's delivery and the heartbeat are what is left out; the real worker path
    is walked in tests/web/test_checkpoint_references.py."""
    from opdweb.jobs.models import Job, JobState
    from opdweb.jobs.runner import record_outcome
    from workers.science.entrypoints import get_kind

    claimed = Job.claim(job.pk, job.attempts, "in-process")
    assert claimed is not None, f"job #{job.pk} is not queued"
    kind = get_kind(claimed.kind)
    result = kind.run(kind.config.model_validate(claimed.config))
    assert record_outcome(claimed, JobState.SUCCEEDED, {"result": result.model_dump(mode="json")})
    return claimed
