"""SkyRL's own config code, run from its installed wheel without importing its package.

SkyRL builds its typed config with ``SkyRLTrainConfig.from_cli_overrides`` (an unknown key
or a value of the wrong type fails there) and checks it with ``validate_cfg`` before it
starts Ray.  Its config module imports its gym environments (pandas, SQL and search tools)
and ``validate_cfg`` the loss registries (Ray, torch, jaxtyping), so both run from the
source of ``requirements-trainers-skyrl.txt`` (:mod:`.trainer_source`) with these imports
answered from the same source: the environments' two config dataclasses, the LoRA test its
config's ``__post_init__`` makes, and the registries as the names its ``ppo_utils`` registers
at import (``@register_policy_loss`` / ``@register_advantage_estimator``).  Left out: the
registries' Ray actor (a team's custom losses; none is exported), and the logger's API key
(``WANDB_API_KEY``, the team's environment: the check runs with one set)."""
from __future__ import annotations

import ast
import logging
import math
import os
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path
from types import SimpleNamespace

from opdweb.exports.trainer_source import SourceChanged, definitions, module_with_imports, substituted_builtins

VERSION = "0.3.0"
#: The checks ``validate_cfg`` (``skyrl/train/utils/utils.py``) runs, itself included.
CHECKS = ["validate_cfg", "validate_generator_cfg", "validate_inference_engine_cfg", "_validate_new_inference_cfg",
          "validate_batch_sizes", "validate_megatron_cfg", "_apply_mtp_config"]
PPO_UTILS = "skyrl.backends.skyrl_train.utils.ppo_utils"


class SkyRLRefuses(ValueError):
    """SkyRL's config code refuses the overrides (its own exception's words)."""


def _registered(ppo_utils: Path, decorator: str, enum: type[StrEnum]) -> list[str]:
    """The names ``ppo_utils`` registers with ``@decorator(Enum.MEMBER)`` at import."""
    tree = ast.parse(ppo_utils.read_text(), str(ppo_utils))
    names = [enum[d.args[0].attr].value for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
             for d in node.decorator_list
             if isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == decorator
             and d.args and isinstance(d.args[0], ast.Attribute)]
    if not names:
        raise SourceChanged(f"{ppo_utils} registers nothing with @{decorator}")
    return names


def _registry(names: list[str]) -> type:
    return type("Registry", (), {"list_available": staticmethod(lambda: list(names))})


@cache
def config_module(root: Path) -> dict:
    """``skyrl/train/config/config.py`` of the wheel at ``root``, as a module namespace."""
    gym = root / "skyrl-gym" / "skyrl_gym" / "envs"
    search = definitions(gym / "search" / "env.py", ["SearchEnvConfig"], {"dataclass": dataclass})
    sql = definitions(gym / "sql" / "env.py", ["Text2SQLEnvConfig"], {"dataclass": dataclass})
    servers = definitions(root / "skyrl" / "backends" / "skyrl_train" / "inference_servers" / "utils.py",
                          ["_uses_lora_weight_sync"], {"SkyRLTrainConfig": object})
    return module_with_imports(root / "skyrl" / "train" / "config" / "config.py", "skyrl_train_config", {
        "skyrl_gym.envs.search.env": {"SearchEnvConfig": search["SearchEnvConfig"]},
        "skyrl_gym.envs.sql.env": {"Text2SQLEnvConfig": sql["Text2SQLEnvConfig"]},
        "skyrl.backends.skyrl_train.inference_servers.utils": {
            "_uses_lora_weight_sync": servers["_uses_lora_weight_sync"]},
    })


@cache
def ppo_names(root: Path) -> dict:
    """From ``ppo_utils.py``: its estimator and loss enums and the losses async training refuses."""
    return definitions(root / "skyrl" / "backends" / "skyrl_train" / "utils" / "ppo_utils.py",
                       ["AdvantageEstimator", "PolicyLossType", "LOSSES_WITH_OLD_LOGPROBS"], {"StrEnum": StrEnum})


@cache
def validate_cfg(root: Path):
    """SkyRL's ``validate_cfg`` of the wheel at ``root``."""
    utils = root / "skyrl" / "train" / "utils" / "utils.py"
    ppo_utils = root / "skyrl" / "backends" / "skyrl_train" / "utils" / "ppo_utils.py"
    enums = ppo_names(root)
    registries = {
        "PolicyLossRegistry": _registry(_registered(ppo_utils, "register_policy_loss", enums["PolicyLossType"])),
        "AdvantageEstimatorRegistry": _registry(
            _registered(ppo_utils, "register_advantage_estimator", enums["AdvantageEstimator"])),
        "repopulate_all_registries": lambda: None,  # syncs the registries with their Ray actor
    }
    environment = SimpleNamespace(environ={**os.environ, "WANDB_API_KEY": "the team's"}, path=os.path)
    namespace = {"__builtins__": substituted_builtins(utils, {PPO_UTILS: registries}), "os": environment, "math": math,
                 "logger": logging.getLogger("skyrl"), "SkyRLTrainConfig": config_module(root)["SkyRLTrainConfig"]}
    return definitions(utils, CHECKS, namespace)["validate_cfg"]


def check(root: Path, overrides: list[str]):
    """SkyRL's config built from ``overrides`` and validated as its trainer does at startup;
    raises :class:`SkyRLRefuses` with SkyRL's own words."""
    try:
        cfg = config_module(root)["SkyRLTrainConfig"].from_cli_overrides(overrides)
        validate_cfg(root)(cfg)
    except SourceChanged:
        raise
    except NameError as exc:  # a name the source uses that this module does not give it: not SkyRL's verdict
        raise SourceChanged(f"SkyRL's config code needs a name not given: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - SkyRL raises AssertionError, ValueError, TypeError, OmegaConf's
        raise SkyRLRefuses(f"{type(exc).__name__}: {exc}") from exc
    return cfg
