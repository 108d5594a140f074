"""Trainers' mismatch metrics in the product's words: one table, read against each
trainer's own source (the commit each entry was read at is in ``source``).

The product's metrics are per token over the rollout-sampled response tokens, with
``d = log p_rollout(y) - log p_train(y)`` and ``r = exp(-d) = p_train / p_rollout``:
k1 = mean d, k3 = mean (r - 1 - log r), ESS = 1 / mean(w_norm^2), each a token mean
over the batch.  An entry is **exact** when the trainer logs that very quantity (same
formula, same direction, a token mean); only exact k3 entries become a multiple of the
checkpoint's BF16 unit (:mod:`.linking`), since the unit and the budget are k3 multiples.
The rest are drawn on their own scale, labelled as not comparable with the budget.
"""
from __future__ import annotations

from dataclasses import dataclass

#: The product's derived series: an exact k3 as a multiple of the linked checkpoint's BF16 unit.
MULTIPLE_KEY = "opdweb/multiple"
#: Metric keys under this prefix are the product's own; trainers may not log them.
RESERVED_PREFIX = "opdweb/"


@dataclass(frozen=True)
class TrainerMetric:
    trainer: str
    key: str  # the metric name as the trainer logs it (with the prefix it adds)
    metric: str  # the product's metric it is, or is nearest to
    exact: bool
    why: str
    source: str  # repository, path and commit the entry was read at


VERL = "verl-project/verl verl/trainer/ppo/rollout_corr_helper.py @1dda039b9c63"
PRIME_RL = "PrimeIntellect-ai/prime-rl src/prime_rl/trainer/rl/loss.py, train.py @559b44772e47"
SLIME = "THUDM/slime slime/backends/megatron_utils/loss.py, model.py @624b824a898a"
NEMO_RL = "NVIDIA-NeMo/RL nemo_rl/algorithms/loss/loss_functions.py, utils.py @7ea279abfbeb"
TRL = "huggingface/trl trl/trainer/grpo_trainer.py @f2cd57710ae3"
OPENRLHF = "OpenRLHF/OpenRLHF openrlhf/models/loss.py, trainer/ray/ppo_actor.py, logging_utils.py @3c3be6234e0c"
TINKER = "thinking-machines-lab/tinker-cookbook tinker_cookbook/rl/metrics.py, rl/train.py @9dfcc3a2cf44"
AREAL = "inclusionAI/AReaL areal/utils/functional/functional.py, trainer/ppo/actor.py @4aef98d8d818"
SKYRL = "NovaSky-AI/SkyRL skyrl/train/trainer.py @a9564572eb8e"
VERL_V1 = "verl-project/verl verl/trainer/ppo/v1/trainer_base.py @1dda039b9c63"

METRICS: tuple[TrainerMetric, ...] = (
    TrainerMetric("verl", "rollout_corr/k3_kl", "k3", True,
                  "masked_mean(exp(l) - l - 1) with l = old_log_prob - rollout_log_prob: r - 1 - log r, "
                  "a token mean over the response mask", VERL),
    TrainerMetric("verl", "rollout_corr/kl", "k1", True,
                  "masked_mean(rollout_log_prob - old_log_prob): mean d, a token mean", VERL),
    TrainerMetric("verl", "rollout_corr/rollout_is_eff_sample_size", "ess", True,
                  "1 / masked_mean(w_norm^2) of the IS weights clamped at rollout_is_threshold and normalised to "
                  "mean 1", VERL),
    TrainerMetric("prime-rl", "mismatch_kl/all/mean", "k3", True,
                  "compute_importance_ratio_and_mismatch_kl: ratio - log_ratio - 1 with log_ratio = trainer - "
                  "inference logprobs, i.e. r - 1 - log r, the mean over all trainable sampled tokens", PRIME_RL),
    TrainerMetric("prime-rl", "mismatch_kl/all/max", "k3", False,
                  "the largest per-token k3 of the step, not a mean", PRIME_RL),
    TrainerMetric("nemo-rl", "train/gen_kl_error", "k3", True,
                  "calculate_kl(generation, reference=policy) with kl_type = loss_fn.reference_policy_kl_type "
                  "(default k3, no clamping): exp(l) - 1 - l with l = policy - generation logprobs, a token mean. "
                  "Exact only with the default k3 (k1 / k2 settings log another estimator under this name)",
                  NEMO_RL),
    TrainerMetric("nemo-rl", "train/token_mult_prob_error", "multiplicative error", False,
                  "mean exp(|d|) (about 1 + mean |d| when small): the size of the log-ratio, signless, not a KL",
                  NEMO_RL),
    TrainerMetric("slime", "train/train_rollout_logprob_abs_diff", "mean |d|", False,
                  "sum_of_sample_mean(|log_probs - rollout_log_probs|): mean absolute logprob difference, averaged "
                  "per sequence first by default; not a KL", SLIME),
    TrainerMetric("trl", "sampling/sampling_logp_difference/mean", "mean |d|", False,
                  "mean |old_per_token_logps - sampling_per_token_logps| over completion tokens: not a KL", TRL),
    TrainerMetric("trl", "sampling/sampling_logp_difference/max", "max |d|", False,
                  "the largest absolute logprob difference of the step", TRL),
    # The trainers that log to W&B only (their keys as the wandb client sends them).
    TrainerMetric("openrlhf", "train/vllm_kl", "k1", True,
                  "masked_mean(rollout_log_probs - old_log_probs) over the response tokens, pooled by token count "
                  "across micro-batches and ranks: mean d. Logged only with vLLM IS correction and the ppo policy "
                  "loss", OPENRLHF),
    TrainerMetric("tinker", "optim/kl_sample_train_v1", "k1", True,
                  "mean(sampling_logprobs - training_logprobs) over all action tokens: mean d (with num_substeps > 1 "
                  "later sub-batches also carry the optimizer's own drift)", TINKER),
    TrainerMetric("tinker", "optim/kl_sample_train_v2", "k2", False,
                  "0.5 * mean(d^2): the k2 estimator, equal to k3 only to second order", TINKER),
    TrainerMetric("areal", "ppo_actor/update/behave_approx_kl/avg", "-k1", False,
                  "mean(proximal_logprobs - behaviour logprobs) over the tokens rejection sampling kept: -d, with "
                  "the staleness between the behaviour and proximal policies mixed in (0 without the decoupled "
                  "loss); logged only with rejection_sampling set", AREAL),
    TrainerMetric("skyrl", "policy/rollout_train_logprobs_abs_diff_mean", "mean |d|", False,
                  "mean |rollout_logprobs - action_log_probs| over the loss-masked tokens: not a KL", SKYRL),
    TrainerMetric("skyrl", "policy/rollout_train_logprobs_abs_diff_max", "max |d|", False,
                  "the largest absolute logprob difference of the step", SKYRL),
    TrainerMetric("verl", "training/off_policy/trajectory_staleness/mean", "staleness", False,
                  "(global_steps - 1) - the newest weight version a trajectory was generated with, a mean over the "
                  "batch's trajectories: the staleness the run actually saw, in weight versions (0: current "
                  "weights); not a mismatch metric, to set beside the config's staleness", VERL_V1),
    TrainerMetric("verl", "training/off_policy/trajectory_staleness_worst/max", "staleness", False,
                  "(global_steps - 1) - the oldest weight version any trajectory of the batch used", VERL_V1),
)

BY_KEY: dict[str, TrainerMetric] = {m.key: m for m in METRICS}
#: The keys whose values are the product's k3 exactly, in the order a run's first one is taken.
EXACT_K3_KEYS: tuple[str, ...] = tuple(m.key for m in METRICS if m.exact and m.metric == "k3")
#: The keys whose values are the product's ESS exactly (the watch's ESS floor reads them).
ESS_KEYS: tuple[str, ...] = tuple(m.key for m in METRICS if m.exact and m.metric == "ess")
#: The keys the watch rules read point by point (:mod:`.watch`); a batch's other keys go
#: to the trace store without being looked at one by one.
WATCHED_KEYS: frozenset[str] = frozenset(EXACT_K3_KEYS) | frozenset(ESS_KEYS)


def trainer_metric(key: str) -> TrainerMetric | None:
    """The table's entry for a logged metric name, or None where the product does not map it."""
    return BY_KEY.get(key)
