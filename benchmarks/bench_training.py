"""OPD step wall time against the bare sum of its passes (issue #10's overhead budget: <= 15%).

    python benchmarks/bench_training.py --student var/toy/demo/student --teacher var/toy/demo/teacher --batch 256 --steps 20

The step is ``OnPolicyTrainer._train_step`` as a training job runs it (rollout engine
re-prepared from the trainer's weights, sampling, grading, teacher scoring, student
forward and backward, AdamW step, IS and mismatch statistics, trace).  The bare sum is the
same three passes on the same problems with nothing around them: sampling from an engine
already built, the teacher's full-vocabulary score, the student's forward and backward of
the full reverse KL.  Each step is followed by its bare passes (interleaved: the machine's
drift hits both alike); medians over ``--steps`` steps after one warm-up step.
"""  # noqa: E501
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--student", default="var/toy/demo/student")
    ap.add_argument("--teacher", default="var/toy/demo/teacher")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--record", action="store_true", help="store the README row (docs/benchmarks/figures.json)")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from workers.science.engines import build_engine
    from workers.science.training import losses
    from workers.science.training.config import OPDConfig
    from workers.science.training.opd import OPDTrainer
    from workers.science.training.trainer import response_logprobs

    cfg = OPDConfig(model=args.student, teacher=args.teacher, steps=args.steps + 1, batch_size=args.batch,
                    eval_every=0, device=args.device, resume=False)
    tr = OPDTrainer(cfg)
    # Interleaved, step by step: a step, then its bare passes (on that step's problems, with
    # the weights it left), so that the machine's drift hits both alike.
    step_s, sample_s, teacher_s, student_s = [], [], [], []
    for i in range(args.steps + 1):
        t0 = time.perf_counter()
        tr._train_step()
        if i:
            step_s.append(time.perf_counter() - t0)
        problems = tr.train_problems(i)
        prompts = tr.encode(problems)
        rcfg = tr.rollout_config(i)
        engine = build_engine(args.student, rcfg, tr.device, base_model=copy.deepcopy(tr.model))
        t0 = time.perf_counter()
        r = engine.sample(prompts, rcfg.sampling, seed=i)
        t1 = time.perf_counter()
        scores = tr.teacher.score(r.prompt_ids, r.tokens, r.mask, return_full=True)
        t2 = time.perf_counter()
        logp = response_logprobs(tr.model, r.prompt_ids, r.tokens, r.mask, tr.pad_id, tr.device)
        loss, _ = losses.full_reverse_kl(logp, scores.full_logprobs, r.mask.to(tr.device))
        loss.backward()
        tr.model.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        engine.close()
        if i:
            sample_s.append(t1 - t0)
            teacher_s.append(t2 - t1)
            student_s.append(t3 - t2)
    med = statistics.median
    bare = med(sample_s) + med(teacher_s) + med(student_s)
    result = {
        "student": args.student, "batch": args.batch, "steps": args.steps, "threads": args.threads,
        "load_avg": os.getloadavg()[0],
        "step_s": med(step_s), "bare_sum_s": bare,
        "bare": {"sample_s": med(sample_s), "teacher_s": med(teacher_s), "student_fwd_bwd_s": med(student_s)},
        "overhead": med(step_s) / bare - 1.0,
    }
    print(json.dumps(result, indent=2))
    if args.record:
        import figures

        figures.record([{
            "id": "training-step", "page": "docs/benchmarks/training.md", "page_title": "training",
            "what": f"one OPD training step over the bare sum of its passes ({Path(args.student).parent.name} toy, "
                    f"batch {args.batch}, medians of {args.steps} steps, {args.threads} thread)",
            "latest": f"{result['overhead']:+.1%} (step {result['step_s']:.3f} s, bare sum {bare:.3f} s)",
            "goal": "≤ 15 %"}])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
