"""The requirement files agree: the hashed lock the Docker image installs pins every
runtime requirement at the version requirements.txt names, with hashes, and the runtime
set carries no test tool."""
import re

from tests.architecture.test_layout import ROOT

PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s\\;]+)", re.M)
TEST_TOOLS = {"pytest", "pytest-django", "pytest-asyncio", "factory-boy", "playwright", "websockets", "schemathesis",
              "ruff", "mypy"}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    return {normalise(name): version for name, version in PIN.findall(text)}


def test_the_lock_pins_every_runtime_requirement_at_its_version_with_hashes():
    runtime = pins((ROOT / "requirements.txt").read_text())
    lock_text = (ROOT / "requirements.lock").read_text()
    locked = pins(lock_text)
    assert runtime, "requirements.txt names no pins"
    for name, version in runtime.items():
        assert name in locked, f"{name} is in requirements.txt but not in requirements.lock (run `make lock`)"
        assert locked[name].split("+")[0] == version, f"{name}: requirements.txt {version}, lock {locked[name]}"
    blocks = re.split(r"\n(?=[A-Za-z0-9])", lock_text.split("\n\n", 1)[-1])
    for block in blocks:
        if PIN.match(block):
            assert "--hash=sha256:" in block, f"no hash for {block.splitlines()[0]}"


def test_the_runtime_set_has_no_test_tools():
    runtime = pins((ROOT / "requirements.txt").read_text())
    assert not TEST_TOOLS & set(runtime), sorted(TEST_TOOLS & set(runtime))
    assert not TEST_TOOLS & set(pins((ROOT / "requirements.lock").read_text()))
