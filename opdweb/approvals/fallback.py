"""The fallback where a trainer cannot keep the approved config's layers in BF16: the same
engine with every layer quantized.  The approval page shows what it measured (the newest
admission check of that engine on the checkpoint, whatever targets it named) and the KV
capacity each gives, so a team sees what deploying to that trainer would cost."""
from __future__ import annotations

from opdweb.jobs.models import Job, JobState
from opdweb.registry.descriptions import latest
from opdweb.rollouts.canonical import canonical_rollout, config_hash, hash_of_rollout
from workers.science.capacity import kv_capacity
from workers.science.config import ConfigError, RolloutConfig
from workers.science.kinds import Kind
from workers.science.module_names import decoder_linear_names, kv_pseudo_name, resolve_keep_bf16

#: How many of the checkpoint's newest admission checks are searched for the fallback's.
CHECKS_SEARCHED = 500


def engine_hash(rollout: dict | None) -> str | None:
    """The hash of the engine a rollout config describes, whichever trainers it names."""
    if not isinstance(rollout, dict):
        return None
    try:
        return config_hash(canonical_rollout({**rollout, "targets": []}))
    except (ValueError, TypeError):
        return None


def _kv_formats(config: RolloutConfig, n_layers: int) -> list[str | None]:
    if config.kv_cache == "none":
        return [None] * n_layers
    kept = resolve_keep_bf16(config.keep_bf16, decoder_linear_names(n_layers), n_layers) if config.keep_bf16 else set()
    return [None if kv_pseudo_name(i) in kept else config.kv_cache for i in range(n_layers)]


def kv_capacities(checkpoint: str, admitted: RolloutConfig, fallback: RolloutConfig) -> dict | None:
    """KV tokens per byte against BF16's, of the admitted engine and of the fallback, from the
    checkpoint's config.json (None where it does not give the attention geometry)."""
    described = latest(checkpoint)
    try:
        model_config = described.config_json if described is not None else {}
        n_layers = int(model_config["num_hidden_layers"])
        return {"admitted": kv_capacity(model_config, _kv_formats(admitted, n_layers))["capacity_ratio"],
                "fallback": kv_capacity(model_config, _kv_formats(fallback, n_layers))["capacity_ratio"]}
    except (ValueError, KeyError, TypeError, ConfigError):
        return None


def fallback_of(approval, statuses: list[dict]) -> dict | None:
    """For an approved config with ``keep_bf16`` that some exports refuse for it: those
    trainers, the all-layers-quantized config, its newest admission check on the checkpoint
    (or None: not measured yet) and the KV capacities."""
    config = RolloutConfig.model_validate(approval.config.config)
    if not config.keep_bf16:
        return None
    refused = [s["format"] for s in statuses
               if s["refused"] and s.get("trainer") and any(r.startswith("keep_bf16") for r in s["refused"])]
    if not refused:
        return None
    fallback = canonical_rollout({**approval.config.config, "keep_bf16": []})
    wanted = engine_hash(fallback)
    checks = (Job.objects.filter(team_id=approval.team_id, kind=Kind.ADMISSION, state=JobState.SUCCEEDED,
                                 config__model=approval.checkpoint).order_by("-created_at", "-pk")[:CHECKS_SEARCHED])
    job = next((j for j in checks if hash_of_rollout(j.config.get("rollout")) is not None
                and engine_hash(j.config.get("rollout")) == wanted), None)
    return {"trainers": [fmt.target for fmt in refused], "config": fallback, "job": job,
            "result": job.result if job else None,
            "capacity": kv_capacities(approval.checkpoint, config, RolloutConfig.model_validate(fallback))}


__all__ = ["engine_hash", "fallback_of", "kv_capacities"]
