"""verl: Hydra overrides for its trainer command line."""
from __future__ import annotations

from opdweb.exports.base import TIS_THRESHOLD, Provenance, comment_block, fp8_weights
from opdweb.exports.quoting import hydra_value
from workers.science.config import DTYPE_LIBRARY_NAMES


def verl_overrides(config: dict, provenance: Provenance) -> str:
    """Hydra overrides for verl's trainer command line, one per line."""
    sampling = config["sampling"]
    lines = comment_block(provenance, config, "verl") + [
        f"actor_rollout_ref.model.path={hydra_value(provenance.checkpoint)}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.dtype={DTYPE_LIBRARY_NAMES[config['dtype']]}",
    ]
    if fp8_weights(config):
        lines.append("actor_rollout_ref.rollout.quantization=fp8")
    if config["kv_cache"] != "none":
        kv = "fp8" if config["kv_cache"] == "fp8_e4m3" else config["kv_cache"]
        lines.append(f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype={kv}")
    lines += [
        f"actor_rollout_ref.rollout.temperature={sampling['temperature']}",
        f"actor_rollout_ref.rollout.top_p={sampling['top_p']}",
        f"data.max_response_length={sampling['max_new_tokens']}",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        "algorithm.rollout_correction.rollout_is=token",
        f"algorithm.rollout_correction.rollout_is_threshold={TIS_THRESHOLD}",
    ]
    if config["staleness"] > 0:
        lines.append(f"trainer.v1.sampler.max_off_policy_threshold={config['staleness']}")
    return "\n".join(lines) + "\n"
