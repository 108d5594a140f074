"""Fixtures for the science tests: the test-size toy pair.

The pair ships in ``fixtures/toy-test`` (teacher 100%, student 38% on 1-digit addition; the
student starts from the teacher's first layer, so on-policy methods move it in seconds).
Regenerate it after a recipe change with
``python -m workers build-toy-models --size test --out tests/science/fixtures/toy-test --force``;
until then (the shipped manifest no longer matches the recipe) the tests build the pair
themselves, once per session.  ``OPDWEB_TOY_DIR`` names a directory to build into instead
(the build is cached by recipe).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

SHIPPED_PAIR = Path(__file__).parent / "fixtures" / "toy-test"


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def toy_dir(tmp_path_factory) -> Path:
    from workers.science.toy import build_toy_models, current_build

    if not os.environ.get("OPDWEB_TOY_DIR") and current_build("test", SHIPPED_PAIR):
        return SHIPPED_PAIR
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


@pytest.fixture
def no_weights_read(monkeypatch):
    """Fail the test if any checkpoint's weights are loaded."""
    from transformers import AutoModelForCausalLM

    def refuse(*a, **k):
        raise AssertionError("weights were loaded before the refusal")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refuse)
