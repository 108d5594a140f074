"""Training tasks: arithmetic as before, and GSM8K (each step's problems drawn from the
official train split by the run's seed and step, accuracy on the test split's first
problems, questions as chat turns); a task without both splits is refused before training."""
import pytest

from workers.science.config import ConfigError
from workers.science.prompts import arithmetic_prompt_set, gsm8k_prompt_set
from workers.science.training.config import OPDConfig
from workers.science.training.job import run_training
from workers.science.training.tasks import EVAL_SEED, training_task


def test_gsm8k_draws_each_steps_problems_from_the_train_split_by_seed():
    task = training_task("gsm8k")
    assert task.chat and task.name == "gsm8k"
    train, test = gsm8k_prompt_set("train"), gsm8k_prompt_set("test")
    assert (len(train), len(test)) == (7473, 1319)  # the official splits
    a, again, other = task.train_set(16, seed=7), task.train_set(16, seed=7), task.train_set(16, seed=8)
    assert a.problems == again.problems and a.problems != other.problems
    assert len({p.prompt for p in a.problems}) == 16 and set(a.problems) <= set(train.problems)
    assert not {p.prompt for p in a.problems} & {p.prompt for p in test.problems}
    held_out = task.eval_set(5)
    assert held_out.problems == test.problems[:5] and held_out.chat
    # graded on the number after ####, commas and a trailing .0 normalised
    answer = held_out.problems[0].answer
    assert held_out.grade([f"so it is\n#### {int(answer):,}.0", "#### -1", "", "", ""])[:2] == [True, False]
    with pytest.raises(ConfigError, match="has 1319 problems"):
        task.eval_set(2000)


def test_arithmetic_keeps_its_splits_and_seeds():
    task = training_task("arithmetic:2")
    assert not task.chat and task.name == "arithmetic:2"
    assert task.train_set(8, seed=3).problems == arithmetic_prompt_set(8, level=2, seed=3, split="train").problems
    assert task.eval_set(8).problems == arithmetic_prompt_set(8, level=2, seed=EVAL_SEED, split="test").problems


@pytest.mark.parametrize("task, said", [("gsm8k:train", "use arithmetic:LEVEL or gsm8k"),
                                        ("math500", "use arithmetic:LEVEL or gsm8k"),
                                        ("arithmetic:x", "must be a number"), ("arithmetic:99", "unknown arithmetic")])
def test_a_task_without_a_train_and_a_held_out_split_is_refused(task, said):
    with pytest.raises(ConfigError, match=said):
        training_task(task)


def test_a_run_on_gsm8k_trains_and_reports_its_task(student, teacher):
    cfg = OPDConfig(model=student, teacher=teacher, task="gsm8k", steps=1, batch_size=2, max_new_tokens=4,
                    eval_every=1, eval_prompts=2, device="cpu")
    report = run_training(cfg).model_dump(mode="json")
    assert report["task"] == "gsm8k" and report["steps"] == 1
    assert [e["step"] for e in report["evals"]] == [0, 1]  # before and after the step, on 2 held-out problems
    assert all(e["accuracy"] in (0.0, 0.5, 1.0) for e in report["evals"])
