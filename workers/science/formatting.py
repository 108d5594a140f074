"""Human-readable reports for the command line, one formatter per job kind, each taking its
kind's typed result (no torch)."""
from __future__ import annotations

from typing import Any

from .budget.results import AdmissionVerdict, CalibrationResult, NoiseSolveResult
from .results import DriftReport, MismatchReport, SensitivityReport
from .training.results import TimeToQualityResult, TrainingResult
from .verdicts import VERDICT_WORDS


def _num(x: Any, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, int):
        return str(x)
    if x == 0:
        return "0"
    return f"{x:.{digits}g}" if 1e-3 <= abs(x) < 1e5 else f"{x:.{digits - 1}e}"


def _multiple_line(r: MismatchReport | SensitivityReport | DriftReport) -> str:
    """The multiple with its CI and the unit pair it is of: a multiple means nothing without it."""
    ci = r.multiple_ci
    ci_s = f"  (95% CI {_num(ci[0], 3)}-{_num(ci[1], 3)})" if ci else ""
    multiple = "undefined (the unit is about zero)" if r.multiple is None and r.value is not None else \
        f"{_num(r.multiple, 4)} x BF16{ci_s}"
    return (f"multiple  {multiple}   of the unit pair {r.unit.pair}   "
            f"{r.metric} {_num(r.value)} vs BF16 {_num(r.reference_value)}")


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    text_cols = {i for i in range(len(headers)) if rows and isinstance(rows[0][i], str)}
    cells = [headers] + [[_num(c) if not isinstance(c, str) else c for c in row] for row in rows]
    widths = [max(len(str(row[i])) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) if i in text_cols else str(c).rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _unit_lines(r: MismatchReport) -> list[str]:
    out = []
    unit = r.unit
    out.append(f"unit      {unit.pair} ({unit.why or ''})")
    floor = r.floor
    if floor:
        out.append(f"floor     {_num(floor.get('value'))} x BF16: the unit against itself under a second seed "
                   f"({_num(floor.get('seed_multiple'))}x); multiples below it mean nothing")
    for name, u in r.units.items():
        if name == unit.engine:
            continue
        ci = u.get("multiple_ci")
        ci_s = f" (95% CI {_num(ci[0], 3)}-{_num(ci[1], 3)})" if ci else ""
        floor_value = (u.get("floor") or {}).get("value")
        out.append(f"also      {_num(u['multiple'])} x {name} BF16{ci_s}, floor {_num(floor_value)}")
    factor = r.unit_factor
    if factor:
        ci = factor.get("ci")
        ci_s = f" (95% CI {_num(ci[0], 3)}-{_num(ci[1], 3)})" if ci else ""
        out.append(f"units     vllm BF16 / hf BF16 = {_num(factor['value'])}{ci_s}")
    prec = r.precision
    if prec:
        share = prec.get("top1pct_share")
        w = prec.get("relative_half_width")
        width = "-" if w is None else f"±{w:.0%}" + (f" of the absolute {r.metric}" if prec.get("of") == "absolute"
                                                    else "")
        out.append(f"precision CI half-width {width} (target ±{prec['target_ci']:.0%}), "
                   f"{len(prec['rounds'])} round(s), stopped: {prec['stopped']}; top 1% of tokens carry "
                   f"{'-' if share is None else format(share, '.0%')} of {r.metric}")
    if r.logprobs:
        out.append(f"logprobs  {r.logprobs}")
    out += [f"WARNING   {w}" for w in r.warnings]
    return out


def format_mismatch(r: MismatchReport) -> str:
    out = [
        f"model     {r.model}   task {r.task}   prompts {r.prompts}   "
        f"tokens {r.tokens} (BF16 reference {r.reference_tokens})",
        _multiple_line(r),
        *_unit_lines(r),
        f"accuracy of the sampled responses {_num(r.accuracy)} (BF16 reference {_num(r.reference_accuracy)})   "
        f"KV capacity {r.kv_cache.capacity_ratio:.2f}x BF16",
        "",
    ]
    rows = []
    for name, ref_v in r.reference_metrics.items():
        s = r.summary.get(name)
        p95 = s.get("p95") if isinstance(s, dict) else None
        mx = s.get("max") if isinstance(s, dict) else None
        rows.append([name, r.metrics.get(name), ref_v, p95, mx])
    out.append(_table(["metric", "config", "BF16 ref", "p95", "max"], rows))
    if r.buckets:
        out.append("")
        out.append(_table(["positions", "tokens", "k3", "k1", "prob_diff"],
                          [[b["positions"], b["tokens"], b["k3"], b["k1"], b["prob_diff"]] for b in r.buckets]))
    return "\n".join(out)


def format_sensitivity(r: SensitivityReport) -> str:
    out = [f"model     {r.model}   prompts {r.prompts}   granularity {r.granularity}   unit {r.unit.engine} BF16",
           "full config: " + _multiple_line(r), ""]
    out.append(_table(["rank", r.granularity or "part", "multiple", "CI low", "CI high"],
                      [[str(u.rank), u.unit, u.multiple, *(u.multiple_ci or [None, None])] for u in r.ranking]))
    rec = r.recipe
    if rec:
        out.append("")
        if rec["reached"]:
            out.append(f"recipe for target {rec['target']}x (reached): keep_bf16 {rec['keep_bf16']} -> "
                       f"{_num(rec['multiple'])}x BF16, KV capacity {rec['kv_cache']['capacity_ratio']:.2f}x BF16")
        else:
            out.append(f"recipe for target {rec['target']}x: NOT reached ({rec.get('note', '')})")
    out.append(f"KV capacity of the full config: {r.kv_cache.capacity_ratio:.2f}x BF16")
    return "\n".join(out)


def format_drift(r: DriftReport) -> str:
    fd = r.first_divergence
    out = [
        f"model     {r.model}   prompts {r.prompts}   decode {r.decode}",
        _multiple_line(r),
        f"diverged  {r.diverged_fraction:.1%} of sequences; first divergence mean {_num(fd['mean'])}, "
        f"median {_num(fd['median'])}, p95 {_num(fd['p95'])}",
        f"mismatch after first divergence: {_num(r.mismatch_after_divergence['share_after'])} of summed k3",
        "",
        _table(["prefix length", "identical fraction"], [[k, v] for k, v in r.identical_prefix_fraction.items()]),
    ]
    return "\n".join(out)


def format_training(r: TrainingResult) -> str:
    t = r.time
    lines = [
        f"method    {r.method}   model {r.model}   task {r.task}   steps {r.steps}   async_k {r.async_k}",
        f"accuracy  {_num(r.start_accuracy)} -> {_num(r.final_accuracy)} (greedy, held-out)",
        f"time      rollout {_num(t['rollout_s'])} s   teacher {_num(t['teacher_s'])} s   "
        f"update {_num(t['update_s'])} s   "
        f"eval {_num(t['eval_s'])} s   (overlapped, modelled: {_num(t['step_overlapped_s'])} s)   tokens {r.tokens}",
        f"checkpoint {r.checkpoint or '-'}",
        "",
        _table(["step", "accuracy"], [[e.step, e.accuracy] for e in r.evals]),
    ]
    return "\n".join(lines)


def format_time_to_quality(r: TimeToQualityResult) -> str:
    rows = []
    for a in r.arms:
        m, o = a["measured_s"], a["modelled_s"]
        sm, so = a["speedup_measured"], a["speedup_modelled"]
        rows.append([a["name"], a["async_k"], a["reached_fraction"], m["mean"], m["std"], o["mean"], sm["mean"],
                     sm["std"], so["mean"], so["std"]])
    return "\n".join([
        f"time to {r.target:.1%} held-out accuracy, {r.method}, {r.seeds} seeds; speed-up = "
        f"time({r.baseline}) / time(arm), seeds paired; modelled = rollout overlapped with the update where async",
        "",
        _table(["arm", "async_k", "reached", "measured s", "sd", "modelled s", "speed-up", "sd", "modelled speed-up",
                "sd"], rows),
    ])


def format_noise_solve(r: NoiseSolveResult) -> str:
    rows = [[t.sigma, t.multiple, _num(t.ci[0], 3) + "-" + _num(t.ci[1], 3) if t.ci else "-"] for t in r.trials]
    return "\n".join([
        f"noise sigma {_num(r.sigma)} realises {_num(r.multiple)}x (95% CI {r.multiple_ci}) of the "
        f"{r.unit.pair} unit's {r.metric}; target {r.target_multiple:g}x",
        "", _table(["sigma", "multiple", "95% CI"], rows)])


def format_calibration(r: CalibrationResult) -> str:
    if not r.stores_budget:
        head = f"no budget ({r.status.replace('_', ' ')})"
    elif r.status == "not_reached":
        head = f"budget not reached: every level stayed within tolerance, the budget is at least {_num(r.budget)}x"
    else:
        head = f"budget {_num(r.budget)}x (between {_num(r.bracket[0])}x and {_num(r.bracket[1])}x)"
    rows: list[list[Any]] = [["BF16", 1.0, None, len(r.baseline.accuracies), r.baseline.mean, r.baseline.sd, 0.0,
                              "-", "baseline"]]
    rows += [[f"{c.target:g}x", c.multiple, c.setting.get("noise_sigma"), len(c.accuracies), c.accuracy_mean,
              c.accuracy_sd, c.drop_points, _drop_interval(c.drop_ci), c.judgement or _old_judgement(c.within)]
             for c in r.curve]
    seeds = sorted({len(c.accuracies) for c in r.curve} | {len(r.baseline.accuracies)})
    seeds_s = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
    return "\n".join([
        f"{head}; {r.method} on {r.checkpoint} ({r.task}), {r.steps} steps x {seeds_s} seeds per level, "
        f"tolerance {r.tolerance:g} points, {r.metric} multiples of the {r.unit_engine} BF16 engine, levels of "
        f"{r.source or 'redrawn-noise'}",
        *_zone_lines(r),
        "", _table(["level", "multiple", "noise sigma", "seeds", "accuracy", "sd", "drop (points)", "drop 95% CI",
                    "judgement"], rows),
        "", f"rule: {r.rule}", *_transfer_lines(r), *(["", r.message] if r.message else [])])


def _old_judgement(within: bool) -> str:
    """A level judged before drop intervals: only whether it was within."""
    return "within" if within else "not within"


def _drop_interval(ci: list[float | None] | None) -> str:
    if not ci:
        return "-"
    return "[" + ", ".join("inf" if e is None else f"{e:+.2f}" for e in ci) + "]"


def _zone_lines(r: CalibrationResult) -> list[str]:
    """The three zones and both criteria of the calibration's curve (:mod:`.budget.zones`)."""
    if not r.curve or r.status == "uninformative":  # no budget: the baseline learned nothing to lose
        return []
    z = r.reading()
    lines = [f"zones     shown safe {_budget_words(z.strict, z.strict_status)}; shown harmful "
             + (f"from {_num(z.harmful)}x" if z.harmful is not None else "nowhere (no level's drop lay wholly "
                                                                         "beyond the tolerance)")
             + "; not shown safe between"]
    if z.undecided is not None:
        lines.append(f"to decide {z.undecided.words()}: {z.undecided.command()}")
    lines.append(f"criteria  strict (upper end of the drop's 95% interval <= tolerance) "
                 f"{_budget_words(z.strict, z.strict_status)}; the paper's (mean drop <= tolerance) "
                 f"{_budget_words(z.mean, z.mean_status)}")
    return lines


def _budget_words(budget: float | None, status: str) -> str:
    if status == "below_ladder" or budget is None:
        return "nowhere (below the lowest level)"
    return f"up to at least {_num(budget)}x (not reached)" if status == "not_reached" else f"up to {_num(budget)}x"


def _transfer_lines(r: CalibrationResult) -> list[str]:
    """The transfer check's table: each deployed source's accuracy against noise of its multiple."""
    if not r.transfer:
        return []
    rows: list[list[Any]] = []
    for t in r.transfer:
        row: list[Any] = [t.name, t.kind, t.multiple]
        row.append(sum(t.accuracies) / len(t.accuracies) if t.accuracies else None)
        for at in (t.redrawn, t.persistent):
            row.append(f"{at.difference_points:+.2f} {at.agreement}" if at else (t.message or "-"))
        rows.append(row)
    return ["", f"transfer (calibrated with {r.source}; shown to transfer: {', '.join(r.shown_to_transfer) or 'none'})",
            _table(["source", "kind", "multiple", "accuracy", "re-drawn noise (points)", "persistent noise (points)"],
                   rows)]


def format_admission(r: AdmissionVerdict) -> str:
    b = r.budget
    harmful = b.harmful
    lines = [f"{r.verdict.upper()} ({VERDICT_WORDS.get(r.verdict, r.verdict)}): {r.reason}",
             _multiple_line(r),
             f"budget {_num(b.budget)}x BF16 of {b.pair} ({b.method}, {b.status}, {b.criterion} criterion); "
             f"shown harmful {f'from {harmful:.3g}x' if harmful is not None else 'not shown'}; margin budget/multiple "
             f"{_num(r.margin)}; KV capacity {_num(r.kv_capacity_gain)}x BF16"]
    if r.to_decide:
        lines.append(f"to decide: {r.to_decide.words}: {r.to_decide.command}")
    if r.prompts_to_decide:
        lines.append(f"about {r.prompts_to_decide} prompts would likely decide it (now {r.prompts})")
    if r.drift:
        d = r.drift
        lines.append(f"prefix drift: {d['diverged_fraction']:.0%} of decodes diverge (median first divergence at "
                     f"{_num(d['first_divergence']['median'])}); {_num(d['share_after'])} of the mismatch lies "
                     "after it")
    if r.recipe:
        lines.append(f"cheapest recipe within budget: {r.recipe['label']} ({_num(r.recipe['multiple'])}x, "
                     f"KV capacity {_num(r.recipe['capacity'])}x)")
    if r.calibrated_with:
        shown = f"; shown to transfer to {', '.join(b.shown_to_transfer)}" if b.shown_to_transfer else ""
        lines.append(f"the budget was calibrated with {r.calibrated_with}{shown}")
    return "\n".join(lines + [f"warning: {w}" for w in r.warnings + (r.transfer_warnings or [])])
