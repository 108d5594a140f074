"""GPU checks for ``benchmarks/gpu_check.sh`` (torch + transformers only; no vLLM, no Django,
no downloads).

1. Real FP8 (``torch._scaled_mm``) against emulated FP8 multiples on the demo student
   (W8A8, per-tensor and per-channel scales; the emulation runs the same arithmetic in
   float32), each with its bootstrap CI.
2. The admission measurement's wall time on a randomly initialised model of
   Qwen2.5-1.5B's shape (28 layers, hidden 1536, 12 heads / 2 KV heads of 128, MLP 8960,
   vocab 151936), FP8 W8A8 weights + FP8 KV cache, against the floor (bare sampling + one
   scoring pass).
3. With ``--smollm2 DIR`` (an imported SmolLM2-135M-Instruct, ``python -m workers import-gguf
   --packaged smollm2``): FP8 W + KV (per-channel weights, FP8 KV cache) on GSM8K, 64 prompts
   x 128 tokens, hf BF16 unit with an fp32 trainer (the pair the CPU figure was measured in),
   its wall time; then W8A8 through ``torch._scaled_mm`` against the same arithmetic emulated.

``--record`` puts the README's two GPU rows, with this host's stamp (load, date, the commit in
``OPDWEB_COMMIT`` where the tree came without ``.git``), into the result file; back on the
project's machine ``python benchmarks/figures.py --record-from gpu_check.json`` stores them.
Only a run on CUDA at full size makes rows.
"""
from __future__ import annotations

import argparse
import atexit
import json
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import figures  # noqa: E402  (first: it takes the load average at the start)


def log(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def fp8_real_vs_emulated(model: str, prompts: int, out: dict, device: str = "cuda") -> None:
    from workers.science.config import MismatchJobConfig, RolloutConfig
    from workers.science.mismatch import run_mismatch

    rows = []
    for scale in ("tensor", "channel"):
        for backend in ("scaled_mm", "emulate"):
            cfg = RolloutConfig(weights="fp8_e4m3", activations="fp8_e4m3", weight_scale=scale, fp8_matmul=backend)
            job = MismatchJobConfig(model=model, rollout=cfg, prompts=prompts, device=device, batch_size=256)
            t0 = time.perf_counter()
            r = run_mismatch(job).model_dump(mode="json")
            rows.append({"weight_scale": scale, "fp8_matmul": backend, "backend_used": r["engine"].get("fp8_backend"),
                         "multiple": r["multiple"], "multiple_ci": r["multiple_ci"], "k3": r["value"],
                         "bf16_k3": r["reference_value"], "tokens": r["tokens"],
                         "wall_s": round(time.perf_counter() - t0, 2)})
            log(json.dumps(rows[-1]))
    out["fp8_real_vs_emulated"] = rows


def qwen15b_admission(prompts: int, max_new_tokens: int, batch: int, out: dict, device: str = "cuda",
                      tiny: bool = False) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from workers.science.config import MismatchJobConfig, RolloutConfig
    from workers.science.measurement import MeasurementSession
    from workers.science.mismatch import run_mismatch
    from workers.science.toy import build_tokenizer

    shape = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2) if tiny else \
        dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28)
    conf = Qwen2Config(vocab_size=151936, **shape, num_attention_heads=2 if tiny else 12, num_key_value_heads=2,
                       max_position_embeddings=32768,
                       rope_theta=1000000.0, tie_word_embeddings=True, rms_norm_eps=1e-6, bos_token_id=1,
                       eos_token_id=1, pad_token_id=0)
    tmp = Path(tempfile.mkdtemp(prefix="qwen15b-random-"))
    atexit.register(shutil.rmtree, tmp, True)  # 3 GB on a GPU host's disk at full shape
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(conf).to(torch.bfloat16)
    model.save_pretrained(tmp)
    build_tokenizer().save_pretrained(tmp)  # character tokenizer: ids stay < 18, fine for timing
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    log(f"random Qwen2.5-1.5B-shaped model written in {time.perf_counter() - t0:.1f} s")

    rollout = RolloutConfig(weights="fp8_e4m3", activations="fp8_e4m3", kv_cache="fp8_e4m3")
    rollout = rollout.model_copy(update={"sampling": rollout.sampling.model_copy(update={"ignore_eos": True})})
    job = MismatchJobConfig(model=str(tmp), rollout=rollout, prompts=prompts, max_new_tokens=max_new_tokens,
                            batch_size=batch, device=device, task="arithmetic:3")
    t0 = time.perf_counter()
    run_mismatch(job)  # the first run also measures the BF16 unit
    cold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = run_mismatch(job).model_dump(mode="json")
    warm_s = time.perf_counter() - t0
    # floor: bare sampling + one scoring pass, engine already built
    session = MeasurementSession(job)
    cfg = session.rollout
    engine = session.engine(cfg)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for start in range(0, prompts, batch):
        b = session.prompt_ids[start : start + batch]
        r = engine.sample(b, cfg.sampling, seed=cfg.seed, offset=start)
        session.trainer.score(b, r.tokens, r.mask)
    sync()
    floor_s = time.perf_counter() - t0
    out["qwen15b_admission"] = {
        "prompts": prompts, "max_new_tokens": max_new_tokens, "tokens": warm["tokens"],
        "fp8_backend": warm["engine"].get("fp8_backend"), "multiple": warm["multiple"],
        "multiple_ci": warm["multiple_ci"],
        "cold_end_to_end_s": round(cold_s, 2), "warm_end_to_end_s": round(warm_s, 2), "floor_s": round(floor_s, 2),
        "timing_warm": warm["timing"], "shape": "tiny (CPU dry run)" if tiny else "Qwen2.5-1.5B",
    }
    if device == "cuda":
        out["qwen15b_admission"].update(gpu=torch.cuda.get_device_name(0),
                                        capability=list(torch.cuda.get_device_capability(0)),
                                        max_memory_gib=round(torch.cuda.max_memory_allocated() / 2**30, 1))
    log(json.dumps(out["qwen15b_admission"]))


def smollm2_fp8(model: str, out: dict, device: str = "cuda", prompts: int = 64, max_new_tokens: int = 128) -> None:
    from workers.science.config import MismatchJobConfig, RolloutConfig
    from workers.science.mismatch import run_mismatch

    configs = [("fp8 W + KV", dict(weights="fp8_e4m3", weight_scale="channel", kv_cache="fp8_e4m3")),
               ("fp8 W8A8 scaled_mm", dict(weights="fp8_e4m3", activations="fp8_e4m3", fp8_matmul="scaled_mm")),
               ("fp8 W8A8 emulated", dict(weights="fp8_e4m3", activations="fp8_e4m3", fp8_matmul="emulate")),
               ("fp8 W + KV, bf16 trainer", dict(weights="fp8_e4m3", weight_scale="channel", kv_cache="fp8_e4m3"))]
    rows = []
    for name, rollout in configs:
        job = MismatchJobConfig(model=model, rollout=RolloutConfig(**rollout), task="gsm8k", prompts=prompts,
                                max_new_tokens=max_new_tokens, batch_size=64, device=device, target_ci=0,
                                reference_engine="hf", trainer_dtype="bf16" if "bf16 trainer" in name else "fp32")
        t0 = time.perf_counter()
        r = run_mismatch(job).model_dump(mode="json")
        rows.append({"config": name, "multiple": r["multiple"], "multiple_ci": r["multiple_ci"], "k3": r["value"],
                     "unit_k3": r["reference_value"], "unit_k3_ci": r.get("reference_value_ci"),
                     "k3_ci": r.get("value_ci"), "unit": r["unit"], "tokens": r["tokens"],
                     "backend_used": r["engine"].get("fp8_backend"), "wall_s": round(time.perf_counter() - t0, 2)})
        log(json.dumps(rows[-1]))
    out["smollm2_gsm8k"] = {"prompts": prompts, "max_new_tokens": max_new_tokens, "rows": rows}


def overlap(a: list[float], b: list[float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def figure_rows(out: dict, prompts: int) -> list[dict]:
    """The README's GPU rows of a full run on CUDA: real FP8 against its emulation (the demo toy's
    W8A8 at both scale granularities, SmolLM2's W8A8), and the admission check's times on the
    Qwen2.5-1.5B-shaped model."""
    if out.get("device") != "cuda" or not out.get("gpu"):
        return []
    page = {"page": "docs/benchmarks/gpu-check.md", "page_title": "gpu-check"}
    rows = []
    toy = {(r["weight_scale"], r["fp8_matmul"]): r for r in out.get("fp8_real_vs_emulated") or []}
    smollm2 = out.get("smollm2_gsm8k") or {}
    w8a8 = {r["config"]: r for r in smollm2.get("rows") or []}
    pairs = [(toy.get((scale, "scaled_mm")), toy.get((scale, "emulate"))) for scale in ("tensor", "channel")]
    pairs.append((w8a8.get("fp8 W8A8 scaled_mm"), w8a8.get("fp8 W8A8 emulated")))
    if all(real and emulated for real, emulated in pairs):
        apart = sum(not overlap(real["multiple_ci"], emulated["multiple_ci"]) for real, emulated in pairs)
        x = [f"{real['multiple']:.1f}x vs {emulated['multiple']:.1f}x" for real, emulated in pairs]
        rows.append({**page, "id": "gpu-fp8", "goal": "agree within CI",
                     "what": f"real FP8 on an {out['gpu']} (not CI: hf BF16 engine / fp32 trainer), real against "
                             f"emulated: demo toy W8A8 per-tensor / per-channel, {prompts} prompts; SmolLM2 W8A8, "
                             f"{smollm2['prompts']} x {smollm2['max_new_tokens']}",
                     "latest": f"{x[0]} / {x[1]}; {x[2]} ("
                               + ("CIs overlap" if not apart else f"{apart} of 3 CIs apart") + ")"})
    admission = out.get("qwen15b_admission")
    if admission and admission.get("shape") == "Qwen2.5-1.5B":
        rows.append({**page, "id": "gpu-admission", "goal": "",
                     "what": f"admission on a Qwen2.5-1.5B-shaped model, FP8 W8A8 + KV, {admission['prompts']} x "
                             f"{admission['max_new_tokens']}, {out['gpu']}: warm / cold / floor",
                     "latest": f"{admission['warm_end_to_end_s']:.2f} s / {admission['cold_end_to_end_s']:.2f} s / "
                               f"{admission['floor_s']:.2f} s, {admission['max_memory_gib']} GiB"})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--demo-dir", default="var/toy/demo")
    ap.add_argument("--prompts", type=int, default=1024)
    ap.add_argument("--admission-prompts", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="cuda", help="cuda; cpu only for a dry run of the code paths")
    ap.add_argument("--tiny", action="store_true", help="dry run: a 2-layer model with the 1.5B vocabulary")
    ap.add_argument("--smollm2", default=None, help="an imported SmolLM2-135M-Instruct folder: check 3")
    ap.add_argument("--smollm2-prompts", type=int, default=64, help="GSM8K prompts of check 3")
    ap.add_argument("--checks", default="fp8,admission,smollm2", help="which checks run, comma separated")
    ap.add_argument("--size", default="demo", choices=["demo", "test"], help="toy size for check 1 (test: dry run)")
    ap.add_argument("--record", action="store_true",
                    help="put the README's rows and this host's stamp into the result (figures.py --record-from)")
    args = ap.parse_args()

    import torch

    from workers.science.quant import scaled_mm_available
    from workers.science.toy import build_toy_models

    dev = torch.device(args.device)
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": args.device,
           "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else None,
           "scaled_mm_available": scaled_mm_available(dev)}
    import transformers

    out["transformers"] = transformers.__version__
    log(json.dumps(out))
    checks = set(args.checks.split(","))
    if "fp8" in checks:
        t0 = time.perf_counter()
        manifest = build_toy_models(args.size, args.demo_dir, device=args.device)
        out["demo_build"] = {k: manifest[k] for k in ("teacher_accuracy", "student_accuracy", "cached")}
        out["demo_build"]["seconds"] = round(time.perf_counter() - t0, 1)
        log(json.dumps(out["demo_build"]))
    steps = [("fp8", lambda: fp8_real_vs_emulated(f"{args.demo_dir}/student", args.prompts, out, args.device)),
             ("admission", lambda: qwen15b_admission(args.admission_prompts, args.max_new_tokens, args.batch_size, out,
                                                     args.device, args.tiny))]
    if args.smollm2:
        steps.append(("smollm2", lambda: smollm2_fp8(args.smollm2, out, args.device, args.smollm2_prompts)))
    steps = [(name, fn) for name, fn in steps if name in checks]
    for name, fn in steps:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - report every check, keep going
            import traceback

            out[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
    if args.record:
        command = f"python benchmarks/gpu_check.py {shlex.join(sys.argv[1:])}"
        out["figures"] = {"rows": figure_rows(out, args.prompts), "stamp": {**figures.stamp(), "command": command}}
        log(f"rows for the README: {', '.join(row['id'] for row in out['figures']['rows']) or 'none'}")
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 1 if any(k.endswith("_error") for k in out) else 0


if __name__ == "__main__":
    raise SystemExit(main())
