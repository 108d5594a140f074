"""Every mismatch metric (REFERENCE §3), computed here (the training loss's k3 trace calls
:func:`k3_terms`; metric names are declared in :mod:`.config`).

Per sampled response token t, with the rollout engine's and the trainer's logprobs of the
token the rollout engine sampled:

    d_t = lp_roll_t - lp_train_t          r_t = exp(-d_t) = p_train / p_roll

    k1          mean d_t                               (unbiased KL(roll||train); can be < 0)
    k2          mean d_t^2 / 2
    k3          mean (r_t - 1 - log r_t)               (>= 0, low variance)
    kl_full     mean_t sum_v p_roll log(p_roll/p_train) (needs both full distributions)
    tv_full     mean_t 1/2 sum_v |p_roll - p_train|
    prob_diff   |exp lp_roll - exp lp_train|           (mean and max)
    chi2_token  E[r^2] - 1                             (variance of token IS weights)
    mult_error  mean exp|d_t|                          (NeMo RL: < 1.03-1.05 acceptable)
    pearson     corr(p_roll, p_train) over tokens
    log_ppl_gap per sequence mean_t lp_roll - mean_t lp_train
    chi2_seq    E_seq[(prod_t r_t)^2] - 1
    ess         1 / mean(w_norm^2), w = r_t, w_norm = w / mean(w)   (fraction in (0, 1])

Identical engines give d_t = 0: every divergence is exactly 0, ``pearson``, ``ess`` and
``mult_error`` are exactly 1.  Aggregation is over masked response tokens only; each
per-token metric is reported as mean, p95 and max, also per position bucket.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

_EXP_CLIP = 700.0


@dataclass
class TokenRecords:
    """Flat per-token arrays over all masked response tokens of a measurement."""

    lp_roll: np.ndarray
    lp_train: np.ndarray
    seq: np.ndarray  # sequence (prompt) index of each token
    pos: np.ndarray  # position of the token within its response
    kl_full: np.ndarray | None = None
    tv_full: np.ndarray | None = None
    n_sequences: int = 0

    @classmethod
    def from_arrays(cls, lp_roll, lp_train, mask, seq_offset: int = 0, kl_full=None, tv_full=None) -> "TokenRecords":
        """From [B, L] arrays (torch or numpy) and the response mask."""
        lp_roll, lp_train, mask = _np(lp_roll, np.float64), _np(lp_train, np.float64), _np(mask, bool)
        b, length = mask.shape
        seq = np.broadcast_to(np.arange(b)[:, None] + seq_offset, (b, length))[mask]
        pos = np.broadcast_to(np.arange(length)[None, :], (b, length))[mask]
        return cls(
            lp_roll[mask], lp_train[mask], seq.astype(np.int64), pos.astype(np.int64),
            None if kl_full is None else _np(kl_full, np.float64)[mask],
            None if tv_full is None else _np(tv_full, np.float64)[mask],
            n_sequences=seq_offset + b,
        )

    @classmethod
    def concat(cls, parts: Sequence["TokenRecords"]) -> "TokenRecords":
        if not parts:
            return cls(np.zeros(0), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))
        full = all(p.kl_full is not None for p in parts)
        return cls(
            np.concatenate([p.lp_roll for p in parts]),
            np.concatenate([p.lp_train for p in parts]),
            np.concatenate([p.seq for p in parts]),
            np.concatenate([p.pos for p in parts]),
            np.concatenate([p.kl_full for p in parts]) if full else None,
            np.concatenate([p.tv_full for p in parts]) if full else None,
            n_sequences=max(p.n_sequences for p in parts),
        )

    @property
    def tokens(self) -> int:
        return int(self.lp_roll.size)


def _np(x, dtype) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if dtype is not bool:
            x = x.double()
        x = x.numpy()
    return np.asarray(x, dtype=dtype)


def full_vocab_terms(full_roll, full_train) -> tuple[np.ndarray, np.ndarray]:
    """Per-position KL(roll||train) and TV from full [..., V] log-distributions (torch),
    computed where the tensors live, in float32, a slab of rows at a time (real vocabularies
    make [B, L, V] large); identical rows give exactly 0."""
    a = full_roll.reshape(-1, full_roll.shape[-1])
    b = full_train.to(a.device).reshape(-1, full_train.shape[-1])
    kls, tvs = [], []
    step = max(1, (1 << 26) // max(1, a.shape[-1]))
    for i in range(0, a.shape[0], step):
        ai, bi = a[i : i + step].float(), b[i : i + step].float()
        pa = ai.exp()
        kls.append((pa * (ai - bi)).sum(-1).clamp_min(0.0).double().cpu())
        tvs.append((0.5 * (pa - bi.exp()).abs().sum(-1)).double().cpu())
    shape = tuple(full_roll.shape[:-1])
    if not kls:
        return np.zeros(shape), np.zeros(shape)
    import torch

    return torch.cat(kls).reshape(shape).numpy(), torch.cat(tvs).reshape(shape).numpy()


def k3_terms(lp_roll: np.ndarray, lp_train: np.ndarray) -> np.ndarray:
    """Per-token k3, the one formula: ``r - 1 - log r`` with ``r = p_train / p_roll`` (so
    ``log r = -d``, ``d = lp_roll - lp_train``); exactly 0 at d = 0, never negative (rounding
    is clamped), ``r`` clipped so an extreme token cannot overflow.  The trainer's k3 trace
    (:func:`~.training.losses.k3`) calls this on its tensors' values: a metric computed
    twice would drift apart."""
    d = np.asarray(lp_roll, dtype=np.float64) - np.asarray(lp_train, dtype=np.float64)
    r = np.exp(np.clip(-d, -_EXP_CLIP, _EXP_CLIP))
    return np.maximum(r - 1.0 + d, 0.0)


def token_terms(rec: TokenRecords) -> dict[str, np.ndarray]:
    """The per-token value of every token-mean metric (the mean over tokens is the metric)."""
    d = rec.lp_roll - rec.lp_train
    r = np.exp(np.clip(-d, -_EXP_CLIP, _EXP_CLIP))
    terms = {
        "k1": d,
        "k2": d * d / 2.0,
        "k3": k3_terms(rec.lp_roll, rec.lp_train),
        "prob_diff": np.abs(np.exp(rec.lp_roll) - np.exp(rec.lp_train)),
        "chi2_token": r * r - 1.0,
        "mult_error": np.exp(np.clip(np.abs(d), 0, _EXP_CLIP)),
    }
    if rec.kl_full is not None:
        terms["kl_full"] = rec.kl_full
        terms["tv_full"] = rec.tv_full
    return terms


def _stats(x: np.ndarray) -> dict[str, float | None]:
    if x.size == 0:
        return {"mean": None, "p95": None, "max": None}
    return {"mean": float(x.mean()), "p95": float(np.percentile(x, 95)), "max": float(x.max())}


def pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    if x.size < 2:
        return None
    if np.array_equal(x, y):
        return 1.0
    xc, yc = x - x.mean(), y - y.mean()
    den = math.sqrt(float((xc * xc).sum()) * float((yc * yc).sum()))
    return float((xc * yc).sum() / den) if den > 0 else None


def sequence_terms(rec: TokenRecords) -> dict[str, np.ndarray]:
    """Per-sequence log-ppl gap and log of the sequence IS weight prod r_t."""
    if rec.tokens == 0:
        return {"log_ppl_gap": np.zeros(0), "log_seq_ratio": np.zeros(0)}
    seqs, inv, counts = np.unique(rec.seq, return_inverse=True, return_counts=True)
    d = rec.lp_roll - rec.lp_train
    sum_d = np.bincount(inv, weights=d, minlength=seqs.size)
    return {"log_ppl_gap": sum_d / counts, "log_seq_ratio": -sum_d}


def summarize(rec: TokenRecords) -> dict:
    """Every metric: ``{name: {mean, p95, max}}`` for token metrics, plus sequence-level and
    scalar ones.  ``metric_values`` flattens it to one number per name."""
    terms = token_terms(rec)
    out: dict = {name: _stats(v) for name, v in terms.items()}
    p_roll, p_train = np.exp(rec.lp_roll), np.exp(rec.lp_train)
    seq = sequence_terms(rec)
    out["log_ppl_gap"] = _stats(seq["log_ppl_gap"])
    lsr = seq["log_seq_ratio"]
    # log-sum-exp: the mean of (prod r)^2 overflows float64 (-> inf, None in JSON) only when it truly exceeds ~1e308
    if lsr.size:
        top = float((2 * lsr).max())
        log_mean = top + math.log(float(np.exp(2 * lsr - top).mean()))
        out["chi2_seq"] = math.expm1(log_mean) if log_mean < 709.0 else math.inf
    else:
        out["chi2_seq"] = None
    out["pearson"] = pearson(p_roll, p_train)
    if rec.tokens:
        w = terms["chi2_token"] + 1.0  # r^2
        r = np.sqrt(w)
        out["ess"] = float(r.mean() ** 2 / (r * r).mean())
    else:
        out["ess"] = None
    out["tokens"] = rec.tokens
    out["sequences"] = int(np.unique(rec.seq).size)
    return out


def metric_values(summary: dict) -> dict[str, float | None]:
    """One number per metric name: the mean for token metrics, plus ``prob_diff_max``."""
    flat: dict[str, float | None] = {}
    for name, v in summary.items():
        if isinstance(v, dict):
            flat[name] = v["mean"]
        elif name not in {"tokens", "sequences"}:
            flat[name] = v
    if isinstance(summary.get("prob_diff"), dict):
        flat["prob_diff_max"] = summary["prob_diff"]["max"]
    return flat


def position_buckets(rec: TokenRecords, edges: Sequence[int]) -> list[dict]:
    """Token-mean metrics per response-position bucket ``[edges[i], edges[i+1])``."""
    terms = token_terms(rec)
    edges = sorted(set(int(e) for e in edges) | {0})
    rows = []
    for i, lo in enumerate(edges):
        hi = edges[i + 1] if i + 1 < len(edges) else None
        sel = (rec.pos >= lo) & (rec.pos < hi if hi is not None else True)
        n = int(sel.sum())
        if n == 0:
            continue
        row = {"positions": f"{lo}-{hi - 1}" if hi is not None else f"{lo}+", "tokens": n}
        row.update({name: float(v[sel].mean()) for name, v in terms.items()})
        rows.append(row)
    return rows


def per_sequence_sums(rec: TokenRecords, metric: str, n_sequences: int) -> tuple[np.ndarray, np.ndarray]:
    """Sum of the metric's per-token values and token count per sequence (for bootstraps)."""
    v = token_terms(rec)[metric]
    sums = np.bincount(rec.seq, weights=v, minlength=n_sequences)
    counts = np.bincount(rec.seq, minlength=n_sequences).astype(np.float64)
    return sums, counts


def token_mean(rec: TokenRecords, metric: str) -> float | None:
    """The metric's mean over response tokens (None without tokens): the absolute value."""
    if rec.tokens == 0:
        return None
    return float(token_terms(rec)[metric].mean())


def multiple_with_ci(
    rec: TokenRecords, ref: TokenRecords, metric: str, n_sequences: int, n_boot: int = 1000, seed: int = 0,
    level: float = 0.95,
) -> tuple[float | None, list[float] | None]:
    """metric(config) / metric(BF16 reference), with a paired bootstrap over prompts:
    both measurements are resampled with the same prompt indices."""
    s1, c1 = per_sequence_sums(rec, metric, n_sequences)
    s0, c0 = per_sequence_sums(ref, metric, n_sequences)
    return ratio_with_ci(s1, c1, s0, c0, n_boot, seed, level)


def mean_with_ci(rec: TokenRecords, metric: str, n_sequences: int, n_boot: int = 1000, seed: int = 0,
                 level: float = 0.95) -> list[float] | None:
    """The bootstrap CI (over prompts) of the metric's token mean: the absolute mismatch's
    interval, which still means something when the unit's mismatch is zero."""
    s, c = per_sequence_sums(rec, metric, n_sequences)
    if n_boot <= 0 or n_sequences < 2 or c.sum() == 0:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n_sequences, size=(n_boot, n_sequences))
    means = s[idx].sum(1) / np.maximum(c[idx].sum(1), 1)
    lo, hi = np.percentile(means, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return [float(lo), float(hi)]


def ratio_with_ci(s1: np.ndarray, c1: np.ndarray, s0: np.ndarray, c0: np.ndarray, n_boot: int = 1000,
                  seed: int = 0, level: float = 0.95) -> tuple[float | None, list[float] | None]:
    """The ratio of two token means given per sequence as sums and counts (``s1/c1`` over
    ``s0/c0``: a config's metric over its reference's), with a paired bootstrap over the
    sequences: both sides are resampled with the same indices, since sequence i of each
    answers the same prompt under the same seed."""
    n_sequences = len(s1)
    value = _ratio(s1.sum(), c1.sum(), s0.sum(), c0.sum())
    if n_boot <= 0 or value is None or n_sequences < 2:
        return value, None
    rng = np.random.default_rng(seed)
    boots = []
    chunk = max(1, min(n_boot, 2_000_000 // max(1, n_sequences)))
    done = 0
    while done < n_boot:
        m = min(chunk, n_boot - done)
        idx = rng.integers(0, n_sequences, size=(m, n_sequences))
        num = s1[idx].sum(1) / np.maximum(c1[idx].sum(1), 1)
        den = s0[idx].sum(1) / np.maximum(c0[idx].sum(1), 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            boots.append(num / den)
        done += m
    b = np.concatenate(boots)
    b = b[np.isfinite(b)]
    if b.size == 0:
        return value, None
    lo, hi = np.percentile(b, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return value, [float(lo), float(hi)]


def _ratio(s1, c1, s0, c0) -> float | None:
    if c1 == 0 or c0 == 0:
        return None
    from .results import multiple_of

    return multiple_of(s1 / c1, s0 / c0)


def first_divergence(tokens_a, mask_a, tokens_b, mask_b) -> np.ndarray:
    """Per sequence, the first response position where two decodes differ (a different
    token, or one ended while the other goes on); -1 where they are identical."""
    ta, tb = _np(tokens_a, np.int64), _np(tokens_b, np.int64)
    ma, mb = _np(mask_a, bool), _np(mask_b, bool)
    length = max(ta.shape[1], tb.shape[1])
    ta, tb = _pad(ta, length, -1), _pad(tb, length, -1)
    ma, mb = _pad(ma, length, False), _pad(mb, length, False)
    differ = (ma != mb) | (ma & mb & (ta != tb))
    first = np.where(differ.any(1), differ.argmax(1), -1)
    return first.astype(np.int64)


def _pad(x: np.ndarray, length: int, value) -> np.ndarray:
    if x.shape[1] == length:
        return x
    out = np.full((x.shape[0], length), value, dtype=x.dtype)
    out[:, : x.shape[1]] = x
    return out


def finite_or_none(x):
    """JSON-safe numbers: inf/nan become None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def json_safe(obj):
    """The report with every non-finite float replaced by None (recursively), numpy scalars
    turned into Python numbers: reports go to JSON columns and ``json.dumps(allow_nan=False)``."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    return obj
