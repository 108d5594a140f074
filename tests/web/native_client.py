"""The native client as a user gets it: ``pip install`` of ``clients/python`` (from a copy,
so the build leaves nothing in the tree) into a folder of its own, run as the ``opdweb``
command it installs."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class InstalledClient:
    target: Path  # what pip installed: the package and bin/opdweb

    def env(self, config_dir: Path, **extra: str) -> dict:
        """A clean environment: only this install importable, no credentials unless given."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPDWEB_") and k != "PYTHONPATH"}
        return {**env, "PYTHONPATH": str(self.target), "OPDWEB_CONFIG_DIR": str(config_dir), **extra}

    def opdweb(self, *args: str, env: dict, timeout: float = 180, stdin: str | None = None):
        return subprocess.run([str(self.target / "bin" / "opdweb"), *args], env=env, capture_output=True, text=True,
                              timeout=timeout, input=stdin, cwd=self.target)


def install_client(into: Path) -> InstalledClient:
    source = into / "source"
    shutil.copytree(ROOT / "clients" / "python", source, ignore=shutil.ignore_patterns("__pycache__", "build",
                                                                                      "*.egg-info"))
    target = into / "installed"
    # Offline: no index, and the venv's setuptools as the build backend.
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, capture_output=True, timeout=300)
    return InstalledClient(target)
