"""Fixtures for the science tests: test-size toy models built once per session.

Set ``OPDWEB_TOY_DIR`` to reuse a build across sessions (the build is cached by recipe).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def toy_dir(tmp_path_factory) -> Path:
    from workers.science.toy import build_toy_models

    out = Path(os.environ.get("OPDWEB_TOY_DIR") or tmp_path_factory.mktemp("toy") / "test")
    manifest = build_toy_models("test", out)
    assert (out / "student" / "config.json").is_file(), manifest
    return out


@pytest.fixture(scope="session")
def toy_manifest(toy_dir) -> dict:
    import json

    return json.loads((toy_dir / "manifest.json").read_text())


@pytest.fixture(scope="session")
def student(toy_dir) -> str:
    return str(toy_dir / "student")


@pytest.fixture(scope="session")
def teacher(toy_dir) -> str:
    return str(toy_dir / "teacher")
