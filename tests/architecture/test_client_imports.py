"""The native client (``clients/python/opdweb_client``) installs anywhere and talks only to
the documented API: it imports the standard library and itself, never Django, ``opdweb``
or ``workers`` (read from the source, lazy imports included, and checked again in a fresh
interpreter), and its package declares no dependency."""
import ast
import json
import subprocess
import sys
import tomllib

from tests.architecture.test_layout import ROOT

CLIENT = ROOT / "clients" / "python"
PACKAGE = CLIENT / "opdweb_client"


def top_level_imports(path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import; the client names itself absolutely"
            found.add(node.module.split(".")[0])
    return found


def test_it_imports_only_the_standard_library_and_itself():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) >= 5
    foreign = {f.name: sorted(m for m in top_level_imports(f) if m != "opdweb_client"
                              and m not in sys.stdlib_module_names and m != "__future__") for f in files}
    assert {name: mods for name, mods in foreign.items() if mods} == {}


def test_it_declares_no_dependency_and_an_opdweb_command():
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == []
    assert project["scripts"] == {"opdweb": "opdweb_client.cli:main"}


PROBE = """
import json, sys
sys.path.insert(0, {path!r})
import opdweb_client, opdweb_client.cli, opdweb_client.run, opdweb_client.jobs
""".strip()


def test_a_fresh_interpreter_importing_it_loads_no_django_nor_the_product():
    probe = PROBE.format(path=str(CLIENT)) + """
print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'opdweb', 'workers', 'pydantic'})))
"""
    # -I: no PYTHONPATH, no current directory on the path; -S: not even site-packages, where Django is.
    out = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-4000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
