"""``python -m workers <subcommand>``: the science from a shell.

Subcommands: ``build-toy-models``, ``mismatch``, ``sensitivity``, ``drift``.  ``--json``
prints exactly one JSON object on stdout; otherwise a readable table.  Bad input prints
one line per problem on stderr and exits 2; a cancelled run exits 130.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from .config import (
    ConfigError,
    DriftJobConfig,
    MismatchJobConfig,
    RolloutConfig,
    SensitivityJobConfig,
    ValidationError,
    describe_validation_error,
)
from .reporting import Cancelled, ConsoleReporter

EXIT_BAD_INPUT = 2
EXIT_CANCELLED = 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workers", description="opdweb science: rollout mismatch on one scale.")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build-toy-models", help="train the tiny teacher and student (cached)")
    b.add_argument("--size", choices=["test", "demo"], required=True)
    b.add_argument("--out", required=True, help="directory; gets teacher/ and student/")
    b.add_argument("--force", action="store_true", help="rebuild even when cached")
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--device", default="cpu", help="cpu | cuda[:N] (training device; the result is the same recipe)")
    b.add_argument("--json", action="store_true")

    def job(name: str, help_: str) -> argparse.ArgumentParser:
        j = sub.add_parser(name, help=help_)
        j.add_argument("--model", required=True, help="checkpoint directory (the student)")
        j.add_argument("--config", required=True, help="rollout config YAML")
        j.add_argument("--prompts", type=int, default=None)
        j.add_argument("--max-new-tokens", type=int, default=None)
        j.add_argument("--seed", type=int, default=None)
        j.add_argument("--task", default=None, help="auto | arithmetic:LEVEL | path to GSM8K/MATH JSONL")
        j.add_argument("--batch-size", type=int, default=None)
        j.add_argument("--device", default=None, help="auto | cpu | cuda[:N]")
        j.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
        j.add_argument("--json", action="store_true", help="print one JSON object")
        return j

    m = job("mismatch", "the config's mismatch as a multiple of BF16's")
    m.add_argument("--metric", default=None, help="primary metric (default k3)")
    m.add_argument("--trainer-dtype", default=None, choices=["fp32", "bf16", "fp16"])
    m.add_argument("--dump", default=None, help="write one JSON line per response (token ids, both logprob lists)")
    s = job("sensitivity", "per-layer multiples, ranking, recipe search")
    s.add_argument("--target", type=float, default=None, help="target multiple for the recipe search")
    s.add_argument("--unit", choices=["layer", "module"], default=None)
    s.add_argument("--metric", default=None)
    d = job("drift", "first divergence of decodes under the same seeds")
    d.add_argument("--greedy", action="store_true", help="greedy decodes instead of seeded sampling")
    return p


def _job_config(args: argparse.Namespace):
    rollout = RolloutConfig.from_file(args.config)
    fields = {"model": args.model, "rollout": rollout, "threads": args.threads}
    for flag in ("prompts", "max_new_tokens", "seed", "task", "batch_size", "device"):
        if getattr(args, flag) is not None:
            fields[flag] = getattr(args, flag)
    if args.command == "mismatch":
        cls = MismatchJobConfig
        if args.metric:
            fields["metric"] = args.metric
        if args.trainer_dtype:
            fields["trainer_dtype"] = args.trainer_dtype
    elif args.command == "sensitivity":
        cls = SensitivityJobConfig
        for flag in ("target", "unit", "metric"):
            if getattr(args, flag) is not None:
                fields[flag] = getattr(args, flag)
    else:
        cls = DriftJobConfig
        if args.greedy:
            fields["decode"] = "greedy"
    return cls.model_validate(fields)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "build-toy-models":
            return _build(args)
        cfg = _job_config(args)
        if cfg.threads:
            import torch

            torch.set_num_threads(cfg.threads)
        from .entrypoints import ENTRYPOINTS

        reporter = ConsoleReporter()
        _, fn = ENTRYPOINTS[args.command]
        kwargs = {"dump_path": args.dump} if args.command == "mismatch" and args.dump else {}
        try:
            report = fn(cfg, reporter, **kwargs)
        finally:
            reporter.close()
    except ValidationError as exc:
        print(f"error: invalid configuration ({getattr(args, 'config', '')}):", file=sys.stderr)
        for line in describe_validation_error(exc):
            print(f"  {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Cancelled as exc:
        print(f"cancelled: {exc}", file=sys.stderr)
        return EXIT_CANCELLED
    if args.json:
        print(json.dumps(report, allow_nan=False, default=_json_default))
    else:
        print({"mismatch": format_mismatch, "sensitivity": format_sensitivity, "drift": format_drift}[args.command](report))
    return 0


def _json_default(x):
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def _build(args) -> int:
    import torch

    from .toy import build_toy_models

    torch.set_num_threads(args.threads)
    reporter = ConsoleReporter()
    try:
        manifest = build_toy_models(args.size, args.out, reporter, force=args.force, device=args.device)
    finally:
        reporter.close()
    if args.json:
        print(json.dumps(manifest))
    else:
        state = "cached" if manifest.get("cached") else f"built in {manifest['build_seconds']} s"
        print(f"toy models ({args.size}) in {args.out}: {state}")
        print(f"  teacher: {manifest['teacher_params']:,} params, greedy accuracy {manifest['teacher_accuracy']:.1%}")
        print(f"  student: {manifest['student_params']:,} params, greedy accuracy {manifest['student_accuracy']:.1%}")
    return 0


# --- human output --------------------------------------------------------------------

def _num(x, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, int):
        return str(x)
    if x == 0:
        return "0"
    return f"{x:.{digits}g}" if 1e-3 <= abs(x) < 1e5 else f"{x:.{digits - 1}e}"


def _multiple_line(r: dict) -> str:
    ci = r.get("multiple_ci")
    ci_s = f"  (95% CI {_num(ci[0], 3)}-{_num(ci[1], 3)})" if ci else ""
    return (f"multiple  {_num(r['multiple'], 4)} x BF16{ci_s}   "
            f"{r['metric']} {_num(r['value'])} vs BF16 {_num(r['reference_value'])}")


def _table(headers: list[str], rows: list[list]) -> str:
    text_cols = {i for i in range(len(headers)) if rows and isinstance(rows[0][i], str)}
    cells = [headers] + [[_num(c) if not isinstance(c, str) else c for c in row] for row in rows]
    widths = [max(len(str(row[i])) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) if i in text_cols else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_mismatch(r: dict) -> str:
    out = [
        f"model     {r['model']}   task {r['task']}   prompts {r['prompts']}   tokens {r['tokens']} (BF16 reference {r['reference_tokens']})",
        _multiple_line(r),
        f"accuracy of the sampled responses {_num(r['accuracy'])} (BF16 reference {_num(r['reference_accuracy'])})   "
        f"KV capacity {r['kv_cache']['capacity_ratio']:.2f}x BF16",
        "",
    ]
    rows = []
    for name, ref_v in r["reference_metrics"].items():
        s = r["summary"].get(name)
        p95 = s.get("p95") if isinstance(s, dict) else None
        mx = s.get("max") if isinstance(s, dict) else None
        rows.append([name, r["metrics"].get(name), ref_v, p95, mx])
    out.append(_table(["metric", "config", "BF16 ref", "p95", "max"], rows))
    if r.get("buckets"):
        out.append("")
        out.append(_table(["positions", "tokens", "k3", "k1", "prob_diff"],
                          [[b["positions"], b["tokens"], b["k3"], b["k1"], b["prob_diff"]] for b in r["buckets"]]))
    return "\n".join(out)


def format_sensitivity(r: dict) -> str:
    out = [f"model     {r['model']}   prompts {r['prompts']}   unit {r['unit']}", "full config: " + _multiple_line(r), ""]
    out.append(_table(["rank", "unit", "multiple", "CI low", "CI high"],
                      [[str(u["rank"]), u["unit"], u["multiple"], *(u["multiple_ci"] or [None, None])] for u in r["ranking"]]))
    rec = r.get("recipe")
    if rec:
        out.append("")
        verdict = "reached" if rec["reached"] else "NOT reached"
        out.append(f"recipe for target {rec['target']}x ({verdict}): keep_bf16 {rec['keep_bf16']} -> "
                   f"{_num(rec['multiple'])}x BF16, KV capacity {rec['kv_cache']['capacity_ratio']:.2f}x BF16")
    out.append(f"KV capacity of the full config: {r['kv_cache']['capacity_ratio']:.2f}x BF16")
    return "\n".join(out)


def format_drift(r: dict) -> str:
    fd = r["first_divergence"]
    out = [
        f"model     {r['model']}   prompts {r['prompts']}   decode {r['decode']}",
        _multiple_line(r),
        f"diverged  {r['diverged_fraction']:.1%} of sequences; first divergence mean {_num(fd['mean'])}, "
        f"median {_num(fd['median'])}, p95 {_num(fd['p95'])}",
        f"mismatch after first divergence: {_num(r['mismatch_after_divergence']['share_after'])} of summed k3",
        "",
        _table(["prefix length", "identical fraction"], [[k, v] for k, v in r["identical_prefix_fraction"].items()]),
    ]
    return "\n".join(out)
