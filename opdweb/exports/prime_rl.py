"""prime-rl: the rollout part of its TOML config file."""
from __future__ import annotations

from opdweb.exports.base import Provenance, comment_block, fp8_weights
from opdweb.exports.quoting import toml_string
from workers.science.config import DTYPE_LIBRARY_NAMES


def prime_rl_toml(config: dict, provenance: Provenance) -> str:
    """The rollout part of a prime-rl config file."""
    sampling = config["sampling"]
    lines = comment_block(provenance, config, "prime-rl") + [
        "",
        "[orchestrator]",
        f"max_off_policy_steps = {config['staleness']}",
        "",
        "[orchestrator.sampling]",
        f"temperature = {sampling['temperature']}",
        f"max_tokens = {sampling['max_new_tokens']}",
        "",
        "[inference.model]",
        f"name = {toml_string(provenance.checkpoint)}",
        f"dtype = \"{DTYPE_LIBRARY_NAMES[config['dtype']]}\"",
        "",
        "[inference.vllm]",
    ]
    if fp8_weights(config):
        lines.append('quantization = "fp8"')
    lines.append(f"kv_cache_dtype = \"{'auto' if config['kv_cache'] == 'none' else config['kv_cache']}\"")
    return "\n".join(lines) + "\n"
