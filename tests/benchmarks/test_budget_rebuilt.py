"""``reproduce_budget.py --record`` compares a run with the results it replaces: every
figure exactly, timings, job ids and paths left out; another demo pair is not compared."""
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from reproduce_budget import rebuilt_text  # noqa: E402

RUN = {
    "settings": {"seeds": 3},
    "demo_pair": {"student": "4389b44f" + "0" * 56, "teacher": "86f7332a" + "0" * 56},
    "budgets": {"grpo": {"id": 3, "wall_s": 1661.2, "budget": 36.3, "bracket": [36.3, 55.8],
                         "checkpoint": "/work/main/var/toy/demo/student",
                         "curve": [{"multiple": 11.5, "accuracies": [0.525, 0.512], "drop_ci": [-1.4, 1.1]}]}},
    "admission": {"verdict": "pass", "multiple": 27.9, "wall_s": 80.0},
    "total_s": 1760.3,
}


def test_a_run_like_the_last_is_identical_whatever_its_timings_ids_and_paths():
    again = copy.deepcopy(RUN)
    again["total_s"], again["budgets"]["grpo"]["wall_s"], again["admission"]["wall_s"] = 1500.0, 1400.0, 70.0
    again["budgets"]["grpo"]["id"] = 9
    again["budgets"]["grpo"]["checkpoint"] = "/tmp/ci-x/var/toy/demo/student"
    again["settings"]["seeds"] = 4
    # 12 figures: the pair's 2 hashes; the budget, its bracket's 2 ends, the level's multiple, its
    # 2 accuracies and its interval's 2 ends; the admission's verdict and multiple
    assert rebuilt_text(RUN, again) == "identical to the last digit: all 12 figures (pair 4389b44f)"


def test_every_differing_figure_is_named():
    other = copy.deepcopy(RUN)
    other["budgets"]["grpo"]["curve"][0]["accuracies"][1] = 0.513
    other["admission"]["verdict"] = "fail"
    assert rebuilt_text(RUN, other) == ("2 of 12 figures differ: /admission/verdict, "
                                        "/budgets/grpo/curve[0]/accuracies[1]")
    fewer = copy.deepcopy(RUN)
    del fewer["budgets"]["grpo"]["curve"][0]["accuracies"][1]
    del fewer["admission"]
    assert rebuilt_text(RUN, fewer) == ("2 of 10 figures differ: /admission, "
                                        "/budgets/grpo/curve[0]/accuracies (2 items before, 1 now)")


def test_another_pair_is_not_compared():
    other = copy.deepcopy(RUN)
    other["demo_pair"]["student"] = "f" * 64
    assert rebuilt_text(RUN, other).startswith("not comparable: another demo pair")
    assert rebuilt_text(None, RUN) == "no earlier results to compare"


def test_record_refuses_settings_other_than_the_defaults():
    ran = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "reproduce_budget.py"), "--record", "--seeds", "2"],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 2
    assert "--record stores the README's rows, which are of the defaults; changed: seeds" in ran.stderr
