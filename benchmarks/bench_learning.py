"""Does every method learn?  Held-out accuracy start -> end per method and seed (issue #13).

    python benchmarks/bench_learning.py --student var/toy/demo/student --teacher var/toy/demo/teacher \
        --methods opd_full,opd_sampled,opd_sampled_tis,grpo,grpo_tis --seeds 3 --budget-s 600

Each run trains until ``--steps`` or the wall-clock ``--budget-s`` (whichever first), then
evaluates greedily on ``--eval-prompts`` held-out problems.  ``--noise-sigma`` puts the
rollout engine at an injected mismatch (the first point of a budget curve).  Prints one
JSON object: per method the runs and the mean and spread of the gain.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

METHODS = {
    "opd_full": {"method": "opd", "loss": "full"},
    "opd_sampled": {"method": "opd", "loss": "sampled"},
    "opd_sampled_tis": {"method": "opd", "loss": "sampled", "correction": "tis"},
    "grpo": {"method": "grpo"},
    "grpo_tis": {"method": "grpo", "tis": True},
}
DEFAULT_LR = {"opd": 1e-4, "grpo": 3e-5}


class Budget:
    """Stops a run after ``seconds`` of wall time; keeps nothing else."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def log(self, step, values):
        pass

    def progress(self, frac, message=""):
        pass

    def should_stop(self) -> bool:
        return time.monotonic() > self.deadline


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--student", default="var/toy/demo/student")
    ap.add_argument("--teacher", default="var/toy/demo/teacher")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--budget-s", type=float, default=600.0)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=None, help="default: OPD 1e-4, GRPO 3e-5")
    ap.add_argument("--noise-sigma", type=float, default=0.0)
    ap.add_argument("--eval-prompts", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from workers.science.reporting import Cancelled
    from workers.science.training.config import training_config
    from workers.science.training.job import trainer_for

    out = {"student": args.student, "batch": args.batch, "steps": args.steps, "budget_s": args.budget_s,
           "noise_sigma": args.noise_sigma, "load_avg": os.getloadavg()[0], "methods": {}}
    for name in args.methods.split(","):
        spec = dict(METHODS[name])
        runs = []
        for seed in range(args.seeds):
            values = {"model": args.student, "steps": args.steps, "batch_size": args.batch, "warmup_steps": 10,
                      "eval_every": 0, "eval_prompts": args.eval_prompts, "seed": seed, "device": "cpu",
                      "threads": args.threads, "resume": False, "lr": args.lr or DEFAULT_LR[spec["method"]],
                      "rollout": {"noise_sigma": args.noise_sigma}, **spec}
            if spec["method"] == "opd":
                values["teacher"] = args.teacher
            t0 = time.perf_counter()
            trainer = trainer_for(training_config(values), Budget(args.budget_s))
            try:
                report = trainer.train()
                start, end = report["start_accuracy"], report["final_accuracy"]
            except Cancelled:
                start, end = trainer.evals[0][1], trainer._evaluate(trainer.step)
            runs.append({"seed": seed, "steps": trainer.step, "start": start, "end": end,
                         "wall_s": round(time.perf_counter() - t0, 1)})
            print(json.dumps({name: runs[-1]}), file=sys.stderr, flush=True)
        gains = [r["end"] - r["start"] for r in runs]
        out["methods"][name] = {"runs": runs, "gain_mean": statistics.fmean(gains),
                                "gain_spread": max(gains) - min(gains)}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
