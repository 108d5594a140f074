"""Per-layer sensitivity, recipe search, and KV-cache capacity.

Sensitivity applies the config to one part of the model at a time (at the ``granularity``
``layer``: a decoder layer; ``module``: one linear module or one layer's KV cache) and keeps
everything else in BF16; the part's multiple says how much of the mismatch it causes.  (The
BF16 *unit* is something else: the engine a multiple is measured in.)  The recipe search
keeps the most sensitive parts in BF16, in ranking order, and finds the shortest such prefix whose multiple is under the
target (binary search: the multiple falls as more units are kept).  Staleness is a
whole-model property and is not localised.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .config import RolloutConfig, ScanGranularity, SensitivityJobConfig
from .measurement import Measurement, MeasurementSession
from .reporting import Reporter
from .results import Comparison, SensitivityReport


@dataclass(frozen=True)
class ScannedPart:
    """One part of the model sensitivity perturbs alone: its label in the report (a ranking
    row's ``unit``) and the ``keep_bf16`` entry that keeps it in BF16 (a layer index, or a
    module / KV-cache name)."""

    label: str
    keep_entry: int | str


def scanned_parts(session: MeasurementSession, granularity: ScanGranularity) -> list[ScannedPart]:
    """The decoder layers, or every decoder linear (plus each layer's KV cache when the
    config quantizes it)."""
    from .engines.hf.targets import decoder_layer_count, decoder_linears, kv_pseudo_name

    n_layers = decoder_layer_count(session.trainer.model)
    if granularity == "layer":
        return [ScannedPart(f"layer {i}", i) for i in range(n_layers)]
    names = list(decoder_linears(session.trainer.model))
    if session.rollout.kv_cache != "none":
        names += [kv_pseudo_name(i) for i in range(n_layers)]
    return [ScannedPart(name, name) for name in names]


def keep_entry(unit: str) -> int | str:
    """The ``keep_bf16`` entry of a ranking row's ``unit`` (a :class:`ScannedPart` label):
    ``layer 3`` is 3, a module or KV-cache name itself."""
    head, _, index = unit.partition(" ")
    return int(index) if head == "layer" and index.isdigit() else unit


def keep_entries(parts: list[ScannedPart]) -> list[int | str]:
    return [p.keep_entry for p in parts]


def with_kept(cfg: RolloutConfig, parts: list[ScannedPart]) -> RolloutConfig:
    """``cfg`` with ``parts`` added to its ``keep_bf16``."""
    return cfg.model_copy(update={"keep_bf16": list(cfg.keep_bf16) + keep_entries(parts)})


class Progress:
    """Equal slices of the progress bar, one per measurement, handed out in order.  More
    measurements than planned (:meth:`grow`) share what is left of the bar: it never goes back."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.floor, self.floor_done = 0.0, 0  # the bar reached, and the measurements done, at the last growth

    def next_slice(self) -> tuple[float, float]:
        k, n = self.done - self.floor_done, self.total - self.floor_done
        self.done += 1
        span = 1.0 - self.floor
        return self.floor + span * k / n, min(1.0, self.floor + span * (k + 1) / n)

    def grow(self, more: int) -> None:
        self.floor += (1.0 - self.floor) * (self.done - self.floor_done) / max(1, self.total - self.floor_done)
        self.floor_done = self.done
        self.total += more


def ranked_rows(rows: list[dict], parts: list[ScannedPart]) -> tuple[list[dict], list[ScannedPart]]:
    """``rows`` (one per part, in the order of ``parts``) ranked by multiple, largest first,
    each with its rank and tier, and the parts in that order."""
    order = sorted(range(len(rows)), key=lambda i: -(rows[i]["multiple"] or 0.0))
    ranked = [dict(rows[i], rank=r + 1) for r, i in enumerate(order)]
    for row, tier in zip(ranked, tiers(ranked), strict=True):
        row["tier"] = tier
    return ranked, [parts[i] for i in order]


def shown_under(ci, target: float | None) -> bool:
    """Whether a multiple's 95 % CI lies under ``target``."""
    return target is not None and bool(ci) and ci[1] is not None and ci[1] <= target


def tiers(ranked: list[dict]) -> list[int]:
    """Tiers of a ranking (largest multiple first): a part joins the tier of the part that
    opened it while its 95 % CI reaches that part's CI, so parts in one tier cannot be told
    apart and only the order of tiers is known.  A part without a CI joins the tier before it
    (nothing separates it)."""
    out: list[int] = []
    tier, opener_low = 0, None
    for row in ranked:
        ci = row.get("multiple_ci")
        high = ci[1] if ci and ci[1] is not None else None
        if not out or (high is not None and opener_low is not None and high < opener_low):
            tier += 1
            opener_low = ci[0] if ci and ci[0] is not None else None
        out.append(tier)
    return out


def ranking_warnings(ranked: list[dict], separation: dict) -> list[str]:
    """What the ranking does not know: the top tier's parts whose CIs overlap, after the
    rounds that measured them again (``separation``: its rounds and prompts)."""
    top = [row["unit"] for row in ranked if row.get("tier") == 1]
    if len(top) < 2:
        return []
    shown = ", ".join(top[:5]) + (f" and {len(top) - 5} more" if len(top) > 5 else "")
    again = (f"after {separation['rounds']} more round(s) on {separation['prompts']} prompts"
             if separation.get("rounds") else f"on {separation['prompts']} prompts")
    return [f"ranking: the 95 % CIs of the top {len(top)} parts overlap ({shown}) {again}: their order is not "
            "known, only that they lead the rest; a larger separate_budget or more prompts may separate them"]


def smallest_passing(lo: int, hi: int, passes: Callable[[int], bool]) -> int | None:
    """The smallest k in [lo, hi] with ``passes(k)``, for a ``passes`` that stays true once
    true (binary search); None when no k passes."""
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        if passes(mid):
            best, hi = mid, mid - 1
        else:
            lo = mid + 1
    return best


class SensitivityRun:
    """One sensitivity job: the session, the BF16 reference and the progress counter that
    every measurement of the job shares."""

    def __init__(self, cfg: SensitivityJobConfig, reporter: Reporter | None) -> None:
        self.cfg = cfg
        self.session = MeasurementSession.open(cfg, reporter)
        self.reporter = self.session.reporter
        self.rollout = self.session.rollout
        self.parts = scanned_parts(self.session, cfg.granularity)
        search_budget = max(1, len(self.parts)).bit_length() + 1 if cfg.target is not None else 0
        self.progress = Progress(2 + len(self.parts) + search_budget)
        self.base = len(self.session.prompt_ids)  # the scan's prompts (more only for a tied top, later)
        ref_cfg = self.session.reference_config(cfg.reference_engine)
        self.ref = self.session.reference(ref_cfg, self.progress.next_slice(), stop=self.base)
        self.refs = {self.base: self.ref}  # the BF16 reference by the prompts it covers (the first n)

    def measure(self, rollout: RolloutConfig, label: str) -> Measurement:
        """``rollout`` on the scan's prompts."""
        return self.session.measure(rollout, label, self.progress.next_slice(), stop=self.base)

    def multiple(self, m: Measurement, prompts: int | None = None) -> tuple[float | None, list[float] | None]:
        """``m``'s multiple of the reference on the same (first ``prompts``) prompts, and its
        paired bootstrap CI."""
        from .metrics import finite_or_none, multiple_with_ci

        n = prompts or self.base
        value, ci = multiple_with_ci(m.records, self.refs[n].records, self.cfg.metric, n, self.cfg.bootstrap,
                                     seed=self.cfg.seed_effective)
        return finite_or_none(value), ci

    def rank_parts(self) -> tuple[list[dict], list[ScannedPart]]:
        """Each part perturbed alone, measured; the report rows ranked by multiple
        (largest first) and the parts in that order."""
        from .metrics import metric_values, summarize

        rows: list[dict[str, Any]] = []
        self.alone: dict[str, Measurement] = {}  # each part perturbed alone, by label
        for i, part in enumerate(self.parts):
            m = self.measure(self.alone_config(part), part.label)
            self.alone[part.label] = m
            value, ci = self.multiple(m)
            rows.append({"unit": part.label, "multiple": value, "multiple_ci": ci, "prompts": self.base,
                         "value": metric_values(summarize(m.records)).get(self.cfg.metric)})
            if value is not None:
                self.reporter.log(i, {"sensitivity/multiple": value})
        return ranked_rows(rows, self.parts)

    def alone_config(self, part: ScannedPart) -> RolloutConfig:
        return with_kept(self.rollout, [p for p in self.parts if p is not part])

    def separate_top(self, rows: list[dict], parts: list[ScannedPart]) -> tuple[list[dict], list[ScannedPart], dict]:
        """While the top tier holds several parts, the reference and those parts are measured
        on as many more prompts (the task's next ones), until one part leads alone, the
        prompts run out or ``separate_budget`` is spent (counted in measurements of the
        scan's own prompts: the reference and every part, the full config, once each)."""
        from .metrics import metric_values, summarize

        budget = self.cfg.separate_budget * (2 + len(self.parts)) * self.base
        spent, rounds, start = 0, 0, self.base
        while True:
            top = [i for i, row in enumerate(rows) if row.get("tier") == 1]
            if len(top) < 2 or spent + (1 + len(top)) * start > budget:
                break
            stop = self.session.extend_prompts(2 * start)
            if stop <= start:
                break
            self.progress.grow(1 + len(top))
            more_ref = self.session.reference(self.ref.cfg, self.progress.next_slice(), start=start, stop=stop)
            self.refs[stop] = self.refs[start].extended(more_ref)
            for i in top:
                part = parts[i]
                more = self.session.measure(self.alone_config(part), f"{part.label} (prompts {start + 1}-{stop})",
                                            self.progress.next_slice(), start=start, stop=stop)
                m = self.alone[part.label] = self.alone[part.label].extended(more)
                value, ci = self.multiple(m, stop)
                rows[i] = dict(rows[i], multiple=value, multiple_ci=ci, prompts=stop,
                               value=metric_values(summarize(m.records)).get(self.cfg.metric))
            spent += (1 + len(top)) * (stop - start)
            rounds, start = rounds + 1, stop
            rows, parts = ranked_rows(rows, parts)
        leaders = sum(1 for row in rows if row.get("tier") == 1)
        return rows, parts, {"rounds": rounds, "prompts": start,
                             "budget_spent": round(spent / budget, 3) if budget else 0.0,
                             "separated": leaders < 2}

    def search_recipe(self, ranked_units: list[ScannedPart], full_report: Comparison) -> dict:
        """The shortest prefix of ``ranked_units`` kept in BF16 that brings the multiple
        under the target, with the trials that found it and the KV capacity it keeps.

        A recipe must keep a gain: keeping every unit is the BF16 engine itself, and a
        recipe whose KV capacity falls back to 1x while the config's is above it gains
        nothing; either is reported as not reached, with no recipe offered."""
        from .capacity import kv_capacity

        target = self.cfg.target
        assert target is not None, "the recipe search needs a target"
        full_mult = full_report.multiple
        full_formats = self.session.kv_layer_formats(self.rollout)
        full_capacity = kv_capacity(self.session.model_config, full_formats)["capacity_ratio"]
        trials: dict[int, dict] = {}
        n = len(ranked_units)
        if shown_under(full_report.multiple_ci, target):
            best: int | None = 0
            trials[0] = {"kept": 0, "multiple": full_mult, "multiple_ci": full_report.multiple_ci}
        elif n >= 2:
            best = smallest_passing(1, n - 1, lambda k: self.try_keeping(ranked_units[:k], trials))
        else:
            best = None
        recipe: dict = {"target": target}
        if best is not None:
            kept = ranked_units[:best]
            recipe_cfg = with_kept(self.rollout, kept)
            capacity = kv_capacity(self.session.model_config, self.session.kv_layer_formats(recipe_cfg))
            if full_capacity > 1.0 and capacity["capacity_ratio"] <= 1.0:
                best = None
                recipe["note"] = (f"keeping {len(kept)} of {n} units reaches the target but leaves no KV capacity gain "
                                  f"({capacity['capacity_ratio']:.2f}x BF16)")
        if best is None:
            recipe.update(keep_bf16=None, multiple=None, multiple_ci=None, reached=False, kv_cache=None, rollout=None)
            recipe.setdefault("note", f"no recipe keeping fewer than all {n} units in BF16 reaches the target "
                                      "(keeping every unit is the BF16 engine: no gain); staleness is not localised")
        else:
            recipe.update(keep_bf16=keep_entries(kept), multiple=trials[best]["multiple"],
                          multiple_ci=trials[best]["multiple_ci"], reached=True, kv_cache=capacity,
                          rollout=recipe_cfg.model_dump(mode="json"))
        recipe["trials"] = [trials[k] for k in sorted(trials) if k > 0]
        return recipe

    def try_keeping(self, kept: list[ScannedPart], trials: dict[int, dict]) -> bool:
        """Measure the config with ``kept`` in BF16, record the trial; True when its 95 % CI lies
        under the target (the admission's rule: a point under it is not shown under it)."""
        k = len(kept)
        m = self.measure(with_kept(self.rollout, kept), f"recipe: keep {k} in BF16")
        value, ci = self.multiple(m)
        trials[k] = {"kept": k, "multiple": value, "multiple_ci": ci}
        if value is not None:
            self.reporter.log(k, {"sensitivity/recipe_multiple": value})
        return shown_under(ci, self.cfg.target)


def run_sensitivity(cfg: SensitivityJobConfig, reporter: Reporter | None = None) -> SensitivityReport:
    """Rank parts by their multiple; with ``target``, the smallest BF16 set (in ranking order)
    that brings the config under it, and the KV capacity that recipe keeps."""
    from .capacity import kv_capacity
    from .metrics import json_safe
    from .multiple import compare

    run = SensitivityRun(cfg, reporter)
    session, rollout = run.session, run.rollout
    full = run.measure(rollout, "full config")
    full_report = compare(session, full, run.ref, cfg.metric, cfg.bootstrap)
    ranked, ranked_parts = run.rank_parts()
    ranked, ranked_parts, separation = run.separate_top(ranked, ranked_parts)
    recipe = run.search_recipe(ranked_parts, full_report) if cfg.target is not None else None
    run.reporter.progress(1.0, "done")
    own_unit = run.ref.cfg.engine == session.unit_engine
    return SensitivityReport.model_validate(json_safe({
        "metric": cfg.metric,
        "model": cfg.model,
        "task": session.task,
        "prompts": run.base,
        "granularity": cfg.granularity,
        "rollout": rollout.model_dump(mode="json"),
        "unit": {"engine": run.ref.cfg.engine, "dtype": "bf16", "trainer": session.trainer_dtype,
                 "why": session.unit_reason if own_unit else "asked for"},
        "warnings": session.warnings + ranking_warnings(ranked, separation),
        **full_report.model_dump(mode="json", include={"value", "reference_value", "multiple", "multiple_ci",
                                                       "tokens", "metrics"}),
        "ranking": ranked,
        "separation": separation,
        "recipe": recipe,
        "kv_cache": kv_capacity(session.model_config, session.kv_layer_formats(rollout)),
        "timing": {"total_s": session.elapsed(), "measurements": run.progress.done},
    }))
