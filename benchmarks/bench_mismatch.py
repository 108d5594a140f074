"""Mismatch measurement: wall time against its floor, and the sample size a trustworthy multiple needs.

``--mode overhead`` (default): wall time against its floor, measured in the same run.

Floor: bare sampling by the rollout engine (no full distributions) + one trainer scoring
pass of the same tokens.  Measurement: the same plus full-vocabulary distributions, every
metric, the bootstrap CI and the report.  Three figures:

* core     - measure() + compare() with the engine already built (what the overhead goal is about)
* warm     - run_mismatch().model_dump(mode="json") end to end with the BF16 reference cached (repeat admission checks)
* cold     - run_mismatch().model_dump(mode="json") end to end, BF16 reference measured too (first check on a model)

    python benchmarks/bench_mismatch.py --model var/toy/demo/student --prompts 256 --max-new-tokens 64

``--mode precision``: for FP8 W, FP8 W + KV and noise 0.1, the tokens (and prompts, rounds,
wall time) ``run_mismatch`` needs to bring the multiple's 95% CI within ±``--target-ci``,
against the ``--unit`` engine, with the unit factor (vLLM BF16 / hf BF16) and its CI:

    python benchmarks/bench_mismatch.py --mode precision --model var/toy/demo/student --prompts 256
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import figures

os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout is the JSON result only

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="var/toy/demo/student")
    ap.add_argument("--build", choices=["test", "demo"], default=None,
                    help="build toy models first (into var/toy/SIZE)")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--config", default="weights: fp8_e4m3\nkv_cache: fp8_e4m3\n", help="rollout config YAML text")
    ap.add_argument("--mode", choices=["overhead", "precision"], default="overhead")
    ap.add_argument("--target-ci", type=float, default=0.25)
    ap.add_argument("--max-tokens", type=int, default=2_000_000)
    ap.add_argument("--unit", default="auto", help="reference engine: auto | hf | vllm")
    ap.add_argument("--record", action="store_true",
                    help="store the README row of --mode overhead (docs/benchmarks/figures.json)")
    args = ap.parse_args()
    if args.mode == "precision":
        return precision(args)

    import torch

    torch.set_num_threads(args.threads)
    from workers.science.config import MismatchJobConfig, RolloutConfig
    from workers.science.measurement import MeasurementSession
    from workers.science.mismatch import run_mismatch
    from workers.science.multiple import compare
    from workers.science.reference_cache import REFERENCE_MEMO as _REFERENCE_MEMO
    from workers.science.toy import build_toy_models

    model = args.model
    if args.build:
        build_toy_models(args.build, f"var/toy/{args.build}", device=args.device)
        model = f"var/toy/{args.build}/student"
    rollout = RolloutConfig.from_yaml(args.config)
    rollout = rollout.model_copy(update={"sampling": rollout.sampling.model_copy(update={"ignore_eos": True})})
    job = MismatchJobConfig(model=model, rollout=rollout, prompts=args.prompts, max_new_tokens=args.max_new_tokens,
                            batch_size=args.batch_size, device=args.device, reference_engine="hf", target_ci=0)
    session = MeasurementSession(job)
    cfg = session.rollout
    engine = session.engine(cfg)
    ref = session.reference(session.reference_config())

    def sync():
        if session.device.type == "cuda":
            torch.cuda.synchronize()

    floors, cores, warms, colds = [], [], [], []
    tokens = 0
    for _ in range(args.repeats):
        sync()
        t0 = time.perf_counter()
        for start in range(0, len(session.prompt_ids), job.batch_size):
            batch = session.prompt_ids[start : start + job.batch_size]
            r = engine.sample(batch, cfg.sampling, seed=cfg.seed, offset=start, return_full=False)
            session.trainer.score(batch, r.tokens, r.mask, return_full=False)
            tokens += int(r.mask.sum()) if _ == 0 else 0
        sync()
        floors.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        m = session.measure(cfg, "bench", engine=engine)
        compare(session, m, ref, job.metric, job.bootstrap, job.position_buckets)
        sync()
        cores.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        report = run_mismatch(job).model_dump(mode="json")  # BF16 reference from the in-process cache
        warms.append(time.perf_counter() - t0)
        assert report["reference_cached"]

        _REFERENCE_MEMO.clear()
        t0 = time.perf_counter()
        run_mismatch(job)
        colds.append(time.perf_counter() - t0)

    med = statistics.median
    floor = med(floors)
    out = {
        "model": model, "device": args.device, "threads": args.threads, "prompts": args.prompts,
        "max_new_tokens": args.max_new_tokens, "tokens": tokens,
        "config": rollout.model_dump(mode="json", exclude_defaults=True),
        "multiple": report["multiple"], "multiple_ci": report["multiple_ci"],
        "floor_s": round(floor, 3), "core_s": round(med(cores), 3), "warm_end_to_end_s": round(med(warms), 3),
        "cold_end_to_end_s": round(med(colds), 3),
        "core_overhead": round(med(cores) / floor - 1, 3),
        "warm_overhead": round(med(warms) / floor - 1, 3),
        "cold_overhead": round(med(colds) / floor - 1, 3),
        "repeats": args.repeats,
    }
    print(json.dumps(out, indent=1))
    if args.record:
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the JSON result only
            figures.record([{
                "id": "mismatch-overhead", "page": "docs/benchmarks/mismatch.md", "page_title": "mismatch",
                "what": "mismatch measurement over sampling + one scoring pass (BF16 unit cached)",
                "latest": f"{100 * (med(warms) / floor - 1):+.1f} %", "goal": "≤ 15 %"}])
    return 0


PRECISION_CONFIGS = {
    "FP8 W (per tensor)": {"weights": "fp8_e4m3"},
    "FP8 W + FP8 KV": {"weights": "fp8_e4m3", "kv_cache": "fp8_e4m3"},
    "noise 0.1": {"noise_sigma": 0.1},
}


def precision(args) -> int:
    """Tokens needed for the target CI half-width, per config, against one unit; then the unit factor."""
    import torch

    torch.set_num_threads(args.threads)
    from workers.science.config import MismatchJobConfig, RolloutConfig
    from workers.science.mismatch import run_mismatch
    from workers.science.reference_cache import REFERENCE_MEMO as _REFERENCE_MEMO

    rows = {}
    for name, rollout in PRECISION_CONFIGS.items():
        _REFERENCE_MEMO.clear()  # each wall time includes measuring the unit and its floor
        job = MismatchJobConfig(model=args.model, rollout=RolloutConfig(**rollout), prompts=args.prompts,
                                max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, device=args.device,
                                reference_engine=args.unit, target_ci=args.target_ci, max_tokens=args.max_tokens,
                                compare_units=name == "FP8 W (per tensor)")
        t0 = time.perf_counter()
        r = run_mismatch(job).model_dump(mode="json")
        wall = time.perf_counter() - t0
        p = r["precision"]
        rows[name] = {"unit": r["unit"]["engine"], "multiple": round(r["multiple"], 3),
                      "multiple_ci": [round(c, 3) for c in r["multiple_ci"]],
                      "relative_half_width": round(p["relative_half_width"], 3), "stopped": p["stopped"],
                      "tokens": r["tokens"], "prompts": r["prompts"], "rounds": len(p["rounds"]),
                      "top1pct_share": round(p["top1pct_share"], 3), "floor": round(r["floor"]["value"], 3),
                      "wall_s": round(wall, 1), "warnings": r["warnings"]}
        if r.get("unit_factor"):
            rows["unit factor (vllm BF16 / hf BF16)"] = {
                "value": round(r["unit_factor"]["value"], 3), "ci": [round(c, 3) for c in r["unit_factor"]["ci"]],
                "prompts": r["prompts"], "units": {k: {"multiple": round(u["multiple"], 3),
                                                       "ci": [round(c, 3) for c in u["multiple_ci"]],
                                                       "floor": round(u["floor"]["value"], 3)}
                                                   for k, u in r["units"].items()}}
    print(json.dumps({"model": args.model, "target_ci": args.target_ci, "max_new_tokens": args.max_new_tokens,
                      "threads": args.threads, "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
