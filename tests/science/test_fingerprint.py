"""A checkpoint's digest covers its weights and config, not a trainer's state saved beside
them; the digest with that state (the rule of before) still names the same content, so the
hashes stored then keep holding."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from transformers.trainer import OPTIMIZER_NAME, OPTIMIZER_NAME_BIN, SCALER_NAME, SCHEDULER_NAME, TRAINING_ARGS_NAME

from workers.science.budget.admission import budget_problems
from workers.science.budget.config import BudgetSpec
from workers.science.checkpoints.cache import CheckpointCache, DigestMismatch
from workers.science.checkpoints.uri import parse
from workers.science.fingerprint import checkpoint_digest, checkpoint_digest_with_trainer_state
from workers.science.training.trainer import STATE_FILE

#: What trainers save beside the weights to resume: the Hugging Face Trainer's names (its own
#: constants), ours, and verl's FSDP optimizer and extra state of rank 0 of 8.
TRAINER_STATE = (OPTIMIZER_NAME, OPTIMIZER_NAME_BIN, SCALER_NAME, SCHEDULER_NAME, TRAINING_ARGS_NAME, STATE_FILE,
                 "optim_world_size_8_rank_0.pt", "extra_state_world_size_8_rank_0.pt")


def by_hand(folder: Path, names: list[str]) -> str:
    """The digest's definition: sha256 over ``name NUL sha256(content) LF`` of each file, by name."""
    h = hashlib.sha256()
    for name in sorted(names):
        h.update(name.encode() + b"\0" + hashlib.sha256((folder / name).read_bytes()).hexdigest().encode() + b"\n")
    return h.hexdigest()


@pytest.fixture()
def checkpoint(tmp_path) -> Path:
    folder = tmp_path / "step-100"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen2"}')
    (folder / "model.safetensors").write_bytes(b"weights at step 100")
    (folder / "pytorch_model.bin").write_bytes(b"the same weights, the older format")
    (folder / "tokenizer.json").write_text("{}")  # the tokenizer has a digest of its own
    return folder


def test_trainer_state_is_left_out_and_the_rule_of_before_kept_it(checkpoint):
    weights = ["config.json", "model.safetensors", "pytorch_model.bin"]
    assert checkpoint_digest(checkpoint) == checkpoint_digest_with_trainer_state(checkpoint) \
        == by_hand(checkpoint, weights)
    for name in TRAINER_STATE:
        (checkpoint / name).write_bytes(f"state in {name}".encode())
    assert checkpoint_digest(checkpoint) == by_hand(checkpoint, weights)
    assert checkpoint_digest_with_trainer_state(checkpoint) == by_hand(checkpoint, [*weights, *TRAINER_STATE])
    (checkpoint / OPTIMIZER_NAME).write_bytes(b"moments after another step")  # saved again: the same checkpoint
    assert checkpoint_digest(checkpoint) == by_hand(checkpoint, weights)
    (checkpoint / "model.safetensors").write_bytes(b"weights at step 101")  # other weights: another checkpoint
    assert checkpoint_digest(checkpoint) == by_hand(checkpoint, weights) != by_hand(checkpoint, weights[:1])


def spec(checkpoint: Path, checkpoint_hash: str) -> BudgetSpec:
    return BudgetSpec.model_validate({"checkpoint": str(checkpoint), "checkpoint_hash": checkpoint_hash,
                                      "task": "arithmetic:1", "method": "opd:full", "metric": "k3",
                                      "unit_engine": "hf", "budget": 10.0, "status": "reached"})


def test_a_budget_calibrated_under_the_rule_of_before_still_judges_its_checkpoint(checkpoint):
    (checkpoint / OPTIMIZER_NAME).write_bytes(b"adam moments")
    today, before = checkpoint_digest(checkpoint), checkpoint_digest_with_trainer_state(checkpoint)
    assert today != before
    for stored in (today, before):
        assert budget_problems(spec(checkpoint, stored), (today, before), "arithmetic:1", "hf") == []
    [problem] = budget_problems(spec(checkpoint, "0" * 64), (today, before), "arithmetic:1", "hf")
    assert problem.startswith("budget: calibrated on checkpoint") and f"(content {today[:12]})" in problem


def test_the_cache_fetches_a_checkpoint_registered_under_the_rule_of_before(checkpoint, tmp_path):
    (checkpoint / SCHEDULER_NAME).write_bytes(b"cosine at step 100")
    before = checkpoint_digest_with_trainer_state(checkpoint)
    cache = CheckpointCache(tmp_path / "cache", max_bytes=1 << 30)
    with cache.checkout(parse(str(checkpoint)), digest=before) as folder:
        assert checkpoint_digest(folder) == checkpoint_digest(checkpoint)  # kept under today's digest
        assert folder.name == checkpoint_digest(checkpoint)
    with pytest.raises(DigestMismatch), cache.checkout(parse(str(checkpoint)), digest="0" * 64):
        pass


def test_an_admission_judges_with_a_budget_stored_under_the_rule_of_before(student, tmp_path):
    """The admission job itself: a budget whose hash included the trainer state beside the
    weights judges that checkpoint; a budget of other content is refused before measuring."""
    import shutil

    from workers.science.budget.config import AdmissionJobConfig
    from workers.science.config import ConfigError, RolloutConfig
    from workers.science.entrypoints import get_kind
    from workers.science.kinds import Kind

    resumable = tmp_path / "student"
    shutil.copytree(student, resumable)
    (resumable / STATE_FILE).write_bytes(b"optimizer, scheduler and RNG at step 100")
    before = checkpoint_digest_with_trainer_state(resumable)
    assert before != checkpoint_digest(resumable) == checkpoint_digest(student)

    def admit(checkpoint_hash: str):
        budget = {"checkpoint": str(resumable), "checkpoint_hash": checkpoint_hash, "task": "arithmetic:1",
                  "method": "opd:full", "metric": "k3", "unit_engine": "hf", "budget": 1e6, "status": "reached"}
        return get_kind(Kind.ADMISSION).run(AdmissionJobConfig(
            model=str(resumable), rollout=RolloutConfig(weights="fp8_e4m3"), budget=budget, prompts=16, drift=False,
            reference_engine="hf", threads=1))

    verdict = admit(before)
    assert verdict.verdict == "pass" and verdict.checkpoint_hash == checkpoint_digest(resumable)
    with pytest.raises(ConfigError, match="calibrated on checkpoint"):
        admit("0" * 64)
