"""On-policy distillation: the student samples from the rollout engine, the teacher scores
every sampled token, the trainer copy moves towards the teacher at the visited prefixes.

Losses (``OPDConfig.loss``, formulas in :mod:`.losses`): ``full`` reverse KL over the
vocabulary at every prefix; ``topk`` reverse KL on the teacher's top-k; ``sampled`` the
per-token advantage ``log pT(y_t) - log pS(y_t)`` in a policy-gradient loss (batch-normalised
by default).  ``correction`` weights the per-token loss from the rollout engine's own
logprobs: ``tis`` (token-level truncated IS at ``is_cap``) or ``mask`` (sequence-level
rejection, verl ``rollout_rs``).
"""
from __future__ import annotations

import torch

from ..config import ConfigError
from ..engines.hf import HFEngine, load_tokenizer
from ..reporting import Reporter
from . import losses
from .config import OPDConfig
from .trainer import OnPolicyTrainer


class OPDTrainer(OnPolicyTrainer):
    method = "opd"
    config: OPDConfig

    def __init__(self, config: OPDConfig, reporter: Reporter | None = None) -> None:
        super().__init__(config, reporter)

    def setup(self) -> None:
        cfg = self.config
        assert cfg.teacher is not None  # OPDConfig requires it
        teacher_tok = load_tokenizer(cfg.teacher)
        problem = _tokenizer_difference(self.tokenizer, teacher_tok)
        if problem:
            raise ConfigError(f"teacher {cfg.teacher!r}: its tokenizer differs from the student's ({problem}); "
                              "OPD scores the student's tokens with the teacher, so both must share one tokenizer")
        self.teacher = HFEngine.trainer(cfg.teacher, "fp32", self.device)
        if int(self.teacher.vocab_size) != int(self.model.config.vocab_size):
            raise ConfigError(f"teacher {cfg.teacher!r}: vocabulary of {self.teacher.vocab_size} logits, "
                              f"the student has {self.model.config.vocab_size}")

    def score_batch(self, batch: dict) -> None:
        r = batch["rollouts"]
        scores = self.teacher.score(r.prompt_ids, r.tokens, r.mask, return_full=self.config.loss != "sampled")
        batch["lp_teacher"] = scores.logprobs
        batch["logp_teacher"] = scores.full_logprobs

    def compute_loss(self, batch: dict) -> tuple[torch.Tensor, dict]:
        cfg = self.config
        mask, lp_roll = batch["mask"], batch["lp_roll"]
        lp_train, lp_teacher = batch["lp_train"].detach(), batch["lp_teacher"]
        weights, stats = self.correction_weights(lp_train, lp_roll, mask, cfg.correction, cfg.is_cap,
                                                 cfg.mask_upper, cfg.mask_lower, cfg.mask_mode)
        dev_mask = mask.to(self.device)
        dev_w = weights.to(self.device) if weights is not None else None
        if cfg.loss == "full":
            loss, more = losses.full_reverse_kl(batch["logp_train"], batch["logp_teacher"], dev_mask, dev_w)
        elif cfg.loss == "topk":
            loss, more = losses.topk_reverse_kl(batch["logp_train"], batch["logp_teacher"], dev_mask, cfg.top_k, dev_w)
        else:
            adv = losses.opd_advantages(lp_teacher, lp_train, mask, cfg.normalize_advantages).to(self.device)
            lp_grad = batch["logp_train"].gather(-1, batch["rollouts"].tokens.to(self.device)[..., None]).squeeze(-1)
            loss, more = losses.policy_gradient_loss(lp_grad, adv, dev_mask, dev_w), {}
        stats = {**stats, **more, "train/reverse_kl": float(losses.masked_mean(lp_train - lp_teacher, mask))}
        return loss, stats


def _tokenizer_difference(a, b) -> str | None:
    """What separates two tokenizers (None when they encode alike): vocabulary or special tokens."""
    va, vb = a.get_vocab(), b.get_vocab()
    if va != vb:
        only_a = sorted(set(va) - set(vb))[:3]
        moved = sorted(t for t in set(va) & set(vb) if va[t] != vb[t])[:3]
        return (f"{len(va)} vs {len(vb)} tokens" + (f"; student-only {only_a}" if only_a else "")
                + (f"; different ids for {moved}" if moved else ""))
    if (a.eos_token_id, a.pad_token_id) != (b.eos_token_id, b.pad_token_id):
        return f"EOS/pad ids {(a.eos_token_id, a.pad_token_id)} vs {(b.eos_token_id, b.pad_token_id)}"
    return None


__all__ = ["OPDConfig", "OPDTrainer"]
