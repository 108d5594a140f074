"""An approved rollout config in the words of the trainer that will run it: vLLM engine
arguments, verl overrides, prime-rl TOML, slime flags, or plain YAML: one module per
trainer, the provenance and notes they share in :mod:`.base`.

Pure functions of the canonical config and its provenance (no Django, no torch), so each
mapping is checked against hand-written expected text.  Key spellings follow the tools'
own (vLLM ``quantization`` / ``kv_cache_dtype``; verl ``actor_rollout_ref.rollout.*`` and
``algorithm.rollout_correction.*``; prime-rl ``[inference.vllm]`` and
``max_off_policy_steps``; slime ``--sglang-kv-cache-dtype``, ``--use-tis``).  What a tool
cannot express (per-channel scales in vLLM's online FP8, staleness in slime) is said in a
note inside the export, never dropped silently.
"""
from __future__ import annotations

from dataclasses import dataclass

from opdweb.exports.base import Provenance
from opdweb.exports.plain_yaml import plain_yaml
from opdweb.exports.prime_rl import prime_rl_toml
from opdweb.exports.slime import slime_flags
from opdweb.exports.verl import verl_overrides
from opdweb.exports.vllm import vllm_engine_args

__all__ = ["FORMATS", "ExportFormat", "Provenance"]


@dataclass(frozen=True)
class ExportFormat:
    slug: str
    title: str
    extension: str
    content_type: str
    render: object  # (config, provenance) -> str


FORMATS = {f.slug: f for f in [
    ExportFormat("vllm", "vLLM engine arguments (JSON)", "json", "application/json", vllm_engine_args),
    ExportFormat("verl", "verl overrides", "txt", "text/plain", verl_overrides),
    ExportFormat("prime-rl", "prime-rl (TOML)", "toml", "application/toml", prime_rl_toml),
    ExportFormat("slime", "slime flags", "sh", "text/plain", slime_flags),
    ExportFormat("yaml", "plain YAML", "yaml", "application/yaml", plain_yaml),
]}
