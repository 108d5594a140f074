"""slime: command-line flags for its training script."""
from __future__ import annotations

from opdweb.exports.base import TIS_THRESHOLD, Provenance, comment_block
from opdweb.exports.quoting import shell_word


def slime_flags(config: dict, provenance: Provenance) -> str:
    """Command-line flags for slime's training script."""
    sampling = config["sampling"]
    flags = [f"--hf-checkpoint {shell_word(provenance.checkpoint)}"]
    if config["kv_cache"] != "none":
        flags.append(f"--sglang-kv-cache-dtype {config['kv_cache']}")
    flags += [
        f"--rollout-temperature {sampling['temperature']}",
        f"--rollout-top-p {sampling['top_p']}",
        f"--rollout-max-response-len {sampling['max_new_tokens']}",
        "--use-tis",
        f"--tis-clip {TIS_THRESHOLD}",
    ]
    return "\n".join(comment_block(provenance, config, "slime") + [" \\\n".join(flags)]) + "\n"
