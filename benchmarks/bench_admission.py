"""Admission check: wall time against its floor, in one run.

Floor: bare sampling by the rollout engine (no full distributions) plus one trainer scoring
pass of the same tokens.  Against it, end to end as a worker runs it (``run_admission``:
preflight, the checkpoint's content hash, the measurement with its bootstrap CI, the verdict):

* warm          - the BF16 reference from the cache (a team's repeat checks of a checkpoint), no drift
* warm + drift  - the same with the prefix-drift diagnostic (the default)
* cold          - the BF16 reference measured too (the first check on a checkpoint), no drift

    python benchmarks/bench_admission.py --model var/toy/demo/student --prompts 256
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import figures

os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="var/toy/demo/student")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--config", default="weights: fp8_e4m3\nweight_scale: channel\nkv_cache: fp8_e4m3\n")
    ap.add_argument("--record", action="store_true", help="store the README row (docs/benchmarks/figures.json)")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from workers.science.budget.admission import run_admission
    from workers.science.budget.config import AdmissionJobConfig
    from workers.science.config import MismatchJobConfig, RolloutConfig
    from workers.science.fingerprint import checkpoint_digest
    from workers.science.measurement import MeasurementSession
    from workers.science.preflight import preflight
    from workers.science.reference_cache import REFERENCE_MEMO as _REFERENCE_MEMO

    rollout = RolloutConfig.from_yaml(args.config)
    cache = tempfile.mkdtemp(prefix="bench-admission-")
    atexit.register(shutil.rmtree, cache, True)  # the references this run cached go with it
    common = dict(model=args.model, rollout=rollout, prompts=args.prompts, max_new_tokens=args.max_new_tokens,
                  reference_engine="hf", target_ci=0.0, threads=args.threads, device="cpu", cache_dir=cache)
    checked = preflight(MismatchJobConfig(**common))
    spec = {"checkpoint": args.model, "checkpoint_hash": checkpoint_digest(args.model), "task": checked.task,
            "method": "opd:full", "metric": "k3", "unit_engine": "hf", "budget": 100.0, "status": "reached"}
    session = MeasurementSession(MismatchJobConfig(**common))
    cfg = session.rollout
    engine = session.engine(cfg)

    floors, warm, warm_drift, cold = [], [], [], []
    report = None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for start in range(0, len(session.prompt_ids), session.job.batch_size):
            batch = session.prompt_ids[start : start + session.job.batch_size]
            r = engine.sample(batch, cfg.sampling, seed=cfg.seed, offset=start, return_full=False)
            session.trainer.score(batch, r.tokens, r.mask, return_full=False)
        floors.append(time.perf_counter() - t0)

        _REFERENCE_MEMO.clear()
        for d in Path(cache).iterdir():
            if d.is_file():
                d.unlink()
        t0 = time.perf_counter()
        run_admission(AdmissionJobConfig(**common, budget=spec, drift=False))
        cold.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        report = run_admission(AdmissionJobConfig(**common, budget=spec, drift=False)).model_dump(mode="json")
        warm.append(time.perf_counter() - t0)
        assert report["reference_cached"]

        t0 = time.perf_counter()
        run_admission(AdmissionJobConfig(**common, budget=spec, drift=True))
        warm_drift.append(time.perf_counter() - t0)
    engine.close()

    med = statistics.median
    floor = med(floors)
    print(json.dumps({
        "model": args.model, "prompts": args.prompts, "tokens": report["tokens"], "threads": args.threads,
        "config": rollout.model_dump(mode="json", exclude_defaults=True), "verdict": report["verdict"],
        "multiple": report["multiple"], "floor_s": round(floor, 3),
        "warm_s": round(med(warm), 3), "warm_with_drift_s": round(med(warm_drift), 3), "cold_s": round(med(cold), 3),
        "warm_over_floor": round(med(warm) / floor, 3), "warm_with_drift_over_floor": round(med(warm_drift) / floor, 3),
        "cold_over_floor": round(med(cold) / floor, 3), "repeats": args.repeats}, indent=1))
    if args.record:
        tokens = round(report["tokens"] / args.prompts, 1)  # per response
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the JSON result only
            figures.record([{
                "id": "admission-overhead", "page": "docs/benchmarks/admission.md", "page_title": "admission",
                "what": f"admission check over its floor, {tokens:g}-token responses",
                "latest": f"{med(warm) / floor:.2f}x", "goal": "≤ 1.15x"}])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
