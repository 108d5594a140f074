"""Prefix drift: under the same seeds, where do the perturbed engine's decodes leave the
reference's, and how much of the mismatch lies after that point?

Both engines sample with common random numbers (``coupling``: by default one exponential per
prompt, position and vocabulary entry, :mod:`.engines.hf.sampling`), so their decodes
coincide until the perturbation flips a token.  Tokens after the first
divergence come from prefixes the reference would not have visited: per-token importance
corrections cannot repair that part of the mismatch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .config import DriftJobConfig
from .reporting import Reporter
from .results import DriftReport

if TYPE_CHECKING:
    from .metrics import TokenRecords


def _stack(rollouts: list) -> tuple[np.ndarray, np.ndarray]:
    length = max(r.tokens.shape[1] for r in rollouts)
    toks, masks = [], []
    for r in rollouts:
        t = np.full((r.tokens.shape[0], length), -1, dtype=np.int64)
        m = np.zeros((r.tokens.shape[0], length), dtype=bool)
        t[:, : r.tokens.shape[1]] = r.tokens.numpy()
        m[:, : r.tokens.shape[1]] = r.mask.numpy()
        toks.append(t)
        masks.append(m)
    return np.concatenate(toks), np.concatenate(masks)


def drift_statistics(first_div: np.ndarray, lengths_a: np.ndarray, probe_lengths: list[int]) -> dict:
    """Distribution of first divergence positions and identical-prefix fractions.

    ``first_div[i]`` is -1 when sequence i is identical in both decodes.  A sequence
    counts as identical up to length L when it has not diverged before position L."""
    n = first_div.size
    diverged = first_div >= 0
    pos = first_div[diverged]
    max_len = int(lengths_a.max()) if lengths_a.size else 0
    curve = [float(((~diverged) | (first_div >= L)).mean()) for L in range(1, max_len + 1)]
    return {
        "sequences": int(n),
        "diverged_fraction": float(diverged.mean()) if n else 0.0,
        "first_divergence": {
            "mean": float(pos.mean()) if pos.size else None,
            "median": float(np.median(pos)) if pos.size else None,
            "p95": float(np.percentile(pos, 95)) if pos.size else None,
            "histogram": {str(int(k)): int(v) for k, v in zip(*np.unique(pos, return_counts=True), strict=True)},
        },
        "identical_prefix_fraction": {str(L): float(((~diverged) | (first_div >= L)).mean()) for L in probe_lengths},
        "identical_prefix_curve": curve,
    }


def mismatch_after_divergence(records: TokenRecords, first_div: np.ndarray, metric: str) -> dict:
    """Share of the summed per-token metric that lies at or after the first divergence."""
    from .metrics import token_terms

    v = token_terms(records)[metric]
    fd = first_div[records.seq]
    after = (fd >= 0) & (records.pos >= fd)
    total = float(v.sum())
    return {
        "metric": metric,
        "share_after": float(v[after].sum() / total) if total > 0 else None,
        "tokens_after": int(after.sum()),
        "tokens_before": int((~after).sum()),
        "mean_before": float(v[~after].mean()) if (~after).any() else None,
        "mean_after": float(v[after].mean()) if after.any() else None,
    }


def run_drift(cfg: DriftJobConfig, reporter: Reporter | None = None) -> DriftReport:
    """Prefix drift of ``cfg.rollout`` against the BF16 reference engine."""
    from .measurement import MeasurementSession
    from .metrics import first_divergence, json_safe
    from .multiple import compare

    session = MeasurementSession.open(cfg, reporter)
    reporter, rollout = session.reporter, session.rollout
    if cfg.decode == "greedy":
        rollout = rollout.model_copy(update={"sampling": rollout.sampling.model_copy(update={"temperature": 0.0})})
    ref_cfg = rollout.bf16_reference("hf" if rollout.engine == "hf" else rollout.engine)
    ref = session.measure(ref_cfg, "BF16 reference", (0.0, 0.5), keep=True)
    m = session.measure(rollout, "rollout config", (0.5, 0.95), keep=True)
    ta, ma = _stack(m.rollouts)
    tb, mb = _stack(ref.rollouts)
    fd = first_divergence(ta, ma, tb, mb)
    stats = drift_statistics(fd, ma.sum(1), cfg.lengths)
    after = mismatch_after_divergence(m.records, fd, "k3")
    body = compare(session, m, ref, "k3", cfg.bootstrap)
    point = {"drift/diverged_fraction": stats["diverged_fraction"]}
    if after["share_after"] is not None:
        point["drift/share_after"] = after["share_after"]
    reporter.log(0, point)
    reporter.progress(1.0, "done")
    return DriftReport.model_validate(json_safe({
        "model": cfg.model,
        "task": session.task,
        "prompts": len(session.prompt_ids),
        "decode": cfg.decode,
        "coupling": cfg.coupling,
        "rollout": rollout.model_dump(mode="json"),
        **stats,
        "mismatch_after_divergence": after,
        "metric": "k3",
        **body.model_dump(mode="json", include={"value", "reference_value", "multiple", "multiple_ci", "tokens"}),
        "unit": {"engine": ref_cfg.engine, "dtype": "bf16", "trainer": session.trainer_dtype,
                 "why": "drift compares decodes of one engine under common random numbers"},
        "bootstrap": cfg.bootstrap,
        "warnings": session.warnings,
        "accuracy": m.accuracy,
        "reference_accuracy": ref.accuracy,
        "timing": {"total_s": session.elapsed()},
    }))
