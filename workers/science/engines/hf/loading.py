"""Loading a checkpoint for the ``hf`` engine: device, path check, model, tokenizer."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ...config import DTYPE_LIBRARY_NAMES, ConfigError

#: The compute dtypes a rollout config names.
TORCH_DTYPES: dict[str, torch.dtype] = {name: getattr(torch, lib) for name, lib in DTYPE_LIBRARY_NAMES.items()}


def resolve_device(device: str | torch.device) -> torch.device:
    """``auto`` is CUDA where there is one, else the CPU."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def check_model_path(model: str) -> None:
    """Refuse a missing local path early with a clear message (hub ids pass through)."""
    p = Path(model)
    looks_local = model.startswith((".", "/", "~")) or p.exists() or model.count("/") != 1
    if looks_local and not (p / "config.json").is_file():
        if not p.exists():
            raise ConfigError(f"model path {model!r} does not exist")
        raise ConfigError(f"model path {model!r} has no config.json; expected a Hugging Face checkpoint directory")


def load_model(model: str, device: torch.device, dtype: torch.dtype = torch.float32) -> nn.Module:
    """The checkpoint as a causal LM in eval mode on ``device``; load failures are ConfigErrors."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    check_model_path(model)
    try:
        m = AutoModelForCausalLM.from_pretrained(model, dtype=dtype)
    except OSError as exc:
        raise ConfigError(f"cannot load model {model!r}: {exc}") from None
    return m.to(device).eval()


def load_model_config(model: str):
    """The checkpoint's transformers config (``config.json``), without its weights."""
    from transformers import AutoConfig

    check_model_path(model)
    try:
        return AutoConfig.from_pretrained(model)
    except OSError as exc:
        raise ConfigError(f"cannot read the config of model {model!r}: {exc}") from None


def load_tokenizer(model: str):
    from transformers import AutoTokenizer

    check_model_path(model)
    return AutoTokenizer.from_pretrained(model)
