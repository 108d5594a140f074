"""Per-token training losses and rollout corrections, each formula written once.

Shapes: ``[B, L]`` for per-token quantities, ``[B, L, V]`` for full log-distributions;
``mask`` ``[B, L]`` (bool) marks the sampled response tokens that count (EOS included).
Every loss returns ``(loss, stats)``: a scalar that is differentiated, aggregated as the
current cluster trainers do ("token-mean": the masked mean over every token of the batch,
verl's ``loss_agg_mode="token-mean"``), and a dict of floats for the trace.

Notation: ``lp_train`` the trainer copy's log-probability of the sampled token (with
gradient where the loss needs it), ``lp_roll`` the rollout engine's own log-probability
of the same token (as it sampled it), ``lp_teacher`` the teacher's.
"""
from __future__ import annotations

import torch

#: Added to standard deviations before dividing (the cluster trainers use 1e-6 / 1e-8).
EPS = 1e-6


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``sum(x * mask) / max(1, sum(mask))``: the token-mean aggregation."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp_min(1.0)


# --- full-distribution losses ----------------------------------------------------------

def full_reverse_kl(logp_student: torch.Tensor, logp_teacher: torch.Tensor, mask: torch.Tensor,
                    weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Reverse KL over the whole vocabulary at every visited prefix:
    ``KL_t = sum_v pS(v|x,y<t) (log pS(v|x,y<t) - log pT(v|x,y<t))``, loss = token-mean of
    ``w_t * KL_t`` (``w_t`` = 1 without a rollout correction).  Exact at each prefix, so it
    needs no advantage or variance reduction; mismatch only moves which prefixes are visited."""
    kl = (logp_student.exp() * (logp_student - logp_teacher.detach())).sum(-1)
    w = torch.ones_like(kl) if weights is None else weights.detach()
    loss = masked_mean(w * kl, mask)
    return loss, {"train/reverse_kl_full": float(masked_mean(kl.detach(), mask))}


def topk_reverse_kl(logp_student: torch.Tensor, logp_teacher: torch.Tensor, mask: torch.Tensor, k: int,
                    weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Reverse KL restricted to the teacher's top-``k`` tokens at each prefix, both
    distributions renormalised on that set S_t (what a trainer can afford when only the
    teacher's top-k logprobs travel): ``KL_t = sum_{v in S_t} qS(v) (log qS(v) - log qT(v))``
    with ``q(v) = p(v) / sum_{u in S_t} p(u)``.  k >= V is the full reverse KL."""
    k = min(k, logp_teacher.shape[-1])
    idx = logp_teacher.detach().topk(k, dim=-1).indices
    qs = torch.log_softmax(logp_student.gather(-1, idx), dim=-1)
    qt = torch.log_softmax(logp_teacher.detach().gather(-1, idx), dim=-1)
    kl = (qs.exp() * (qs - qt)).sum(-1)
    w = torch.ones_like(kl) if weights is None else weights.detach()
    return masked_mean(w * kl, mask), {"train/reverse_kl_topk": float(masked_mean(kl.detach(), mask))}


# --- sampled-token estimators -------------------------------------------------------------

def opd_advantages(lp_teacher: torch.Tensor, lp_student: torch.Tensor, mask: torch.Tensor,
                   normalize: bool = True) -> torch.Tensor:
    """The per-token OPD advantage ``A_t = log pT(y_t) - log pS(y_t)`` (no gradient, discount
    0).  With ``normalize`` (variance reduction), per batch over the masked tokens:
    ``A_t <- (A_t - mean A) / (std A + EPS)`` with the population std.  Zero off the mask."""
    a = (lp_teacher - lp_student).detach()
    if normalize:
        m = mask.to(a.dtype)
        n = m.sum().clamp_min(1.0)
        mean = (a * m).sum() / n
        std = (((a - mean) ** 2 * m).sum() / n).sqrt()
        a = (a - mean) / (std + EPS)
    return a * mask.to(a.dtype)


def grpo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """GRPO's group-relative outcome advantage, one per sequence: rewards ``[N]`` in groups
    of ``group_size`` consecutive samples of the same prompt,
    ``A_i = (r_i - mean_group r) / (std_group r + EPS)`` with the unbiased std (n - 1, as
    TRL and verl compute it).  A group whose rewards are all equal gets A = 0."""
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    r = rewards.to(torch.float64).view(-1, group_size)
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, keepdim=True, unbiased=True) if group_size > 1 else torch.zeros_like(mean)
    return ((r - mean) / (std + EPS)).view(-1).to(torch.float32)


def policy_gradient_loss(lp_train: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                         weights: torch.Tensor | None = None) -> torch.Tensor:
    """The importance-weighted policy-gradient loss of one on-policy update:
    ``L = -token_mean_t( w_t * A_t * log pS_train(y_t) )`` with ``w_t`` and ``A_t`` held
    constant (its gradient is PPO's at ratio 1, where clipping is inactive)."""
    w = torch.ones_like(lp_train) if weights is None else weights.detach()
    return -masked_mean(w * advantages.detach() * lp_train, mask)


# --- rollout corrections -----------------------------------------------------------------

def truncated_is_weights(lp_train: torch.Tensor, lp_roll: torch.Tensor, mask: torch.Tensor,
                         cap: float = 2.0) -> tuple[torch.Tensor, dict]:
    """Token-level truncated importance sampling (verl ``rollout_is=token``, slime
    ``--use-tis``): ``w_t = min(pS_train(y_t) / p_roll(y_t), C) = min(exp(lp_train - lp_roll), C)``,
    no gradient.  Stats over the masked tokens: mean and max of w, the fraction clipped
    (raw ratio > C), and the effective sample size fraction ``1 / mean(w_n^2)`` with
    ``w_n = w / mean(w)``."""
    ratio = (lp_train.detach() - lp_roll).exp()
    w = ratio.clamp(max=cap) * mask.to(ratio.dtype)
    return w, weight_stats(w, mask, clipped=(ratio > cap) & mask)


def sequence_mask(lp_train: torch.Tensor, lp_roll: torch.Tensor, mask: torch.Tensor, upper: float = 2.0,
                  lower: float | None = None, mode: str = "geometric") -> tuple[torch.Tensor, dict]:
    """Sequence-level rejection (verl ``rollout_rs``): a response whose IS ratio falls
    outside ``[lower, upper]`` (``lower`` defaults to ``1 / upper``) is dropped from the loss.
    ``mode`` "sequence": ratio ``exp(sum_t (lp_train - lp_roll))``; "geometric" (verl
    ``geo_mean``): ``exp(mean_t (lp_train - lp_roll))``, which does not shrink with length.
    Returns the 0/1 weights ``[B, L]`` and the masked fraction of sequences."""
    lower = 1.0 / upper if lower is None else lower
    m = mask.to(torch.float64)
    d = ((lp_train.detach() - lp_roll).to(torch.float64) * m).sum(-1)
    if mode == "geometric":
        d = d / m.sum(-1).clamp_min(1.0)
    elif mode != "sequence":
        raise ValueError(f"unknown sequence-mask mode {mode!r}")
    ratio = d.exp()
    keep = (ratio >= lower) & (ratio <= upper)
    w = keep[:, None].to(torch.float32) * mask.to(torch.float32)
    has_tokens = mask.any(-1)
    masked = float((~keep & has_tokens).sum()) / max(1, int(has_tokens.sum()))
    stats = weight_stats(w, mask)
    stats["is/masked_fraction"] = masked
    return w, stats


def weight_stats(w: torch.Tensor, mask: torch.Tensor, clipped: torch.Tensor | None = None) -> dict:
    """Mean / max / ESS fraction of per-token weights over the masked tokens (and the
    clipped fraction where given)."""
    vals = w[mask].to(torch.float64)
    if vals.numel() == 0:
        return {"is/weight_mean": 1.0, "is/weight_max": 1.0, "is/ess": 1.0, "is/clip_fraction": 0.0}
    mean = vals.mean()
    ess = float(1.0 / ((vals / mean) ** 2).mean()) if mean > 0 else 0.0
    out = {"is/weight_mean": float(mean), "is/weight_max": float(vals.max()), "is/ess": ess}
    out["is/clip_fraction"] = float(clipped[mask].to(torch.float64).mean()) if clipped is not None else 0.0
    return out


def k3_sequence_sums(lp_train: torch.Tensor, lp_roll: torch.Tensor, mask: torch.Tensor):
    """Per sequence (row), the sum of the masked tokens' k3 (:func:`k3`'s terms) and how many
    tokens count: what a bootstrap over sequences resamples.  Two float64 numpy arrays."""
    import numpy as np

    from ..metrics import k3_terms

    keep = mask.bool().cpu().numpy()
    roll = lp_roll.detach().to(torch.float64).cpu().numpy()
    train = lp_train.detach().to(torch.float64).cpu().numpy()
    terms = np.where(keep, k3_terms(roll, train), 0.0)
    return terms.sum(axis=1), keep.sum(axis=1).astype(np.float64)


def k3(lp_train: torch.Tensor, lp_roll: torch.Tensor, mask: torch.Tensor) -> float:
    """Mismatch of the rollout engine against the trainer on the same tokens: the token mean
    of the measurement's own per-token k3 (:func:`workers.science.metrics.k3_terms`, the one
    formula), taken on the masked tokens' values.  It is a traced number, not a loss term, so
    it leaves the graph and runs in numpy; 0 when no token counts."""
    from ..metrics import k3_terms

    keep = mask.bool()
    if not bool(keep.any()):
        return 0.0
    roll = lp_roll.detach()[keep].to(torch.float64).cpu().numpy()
    train = lp_train.detach()[keep].to(torch.float64).cpu().numpy()
    return float(k3_terms(roll, train).mean())
