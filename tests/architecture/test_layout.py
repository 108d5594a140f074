"""The shape of the code: one direction of dependency and no import loops.

Read from the source (every ``import``, at module level or inside a function), so a lazy
import cannot hide an arrow that runs back up.
"""
import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("opdweb", "workers")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved."""
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def project_graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "migrations" not in p.parts]
    modules = {module_name(p): p for p in files}
    graph = {}
    for name, path in modules.items():
        graph[name] = {m for m in imports_of(path) if m in modules and m != name}
    return graph


def component(module: str) -> str:
    """``opdweb.jobs.runner`` -> ``opdweb.jobs``; ``workers.science.engines.hf`` -> ``workers``."""
    parts = module.split(".")
    return "workers" if parts[0] == "workers" else ".".join(parts[:2])


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_science_never_imports_django_or_opdweb():
    for path in (ROOT / "workers").rglob("*.py"):
        bad = {m for m in imports_of(path) if m.split(".")[0] in ("django", "opdweb", "channels", "celery")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_no_module_import_loop():
    graph = project_graph()
    # A package's __init__ is imported on the way to its modules; it is not an arrow back.
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_loop_between_apps():
    apps: dict[str, set[str]] = defaultdict(set)
    for module, deps in project_graph().items():
        for dep in deps:
            if component(dep) != component(module):
                apps[component(module)].add(component(dep))
    assert "opdweb" not in {c.split(".")[0] for c in apps["workers"]}
    assert find_cycle(apps) is None, " -> ".join(find_cycle(apps))


def science_part(module: str) -> str:
    """``workers.science.budget.calibration`` -> ``workers.science.budget``: a sub-package
    or a top-level module of the science half."""
    return ".".join(module.split(".")[:3])


def test_no_loop_between_the_science_parts():
    """Sub-packages and top-level modules of the science, counting imports inside functions
    too (a lazy import is still an arrow: entrypoints -> budget -> children -> entrypoints
    was a loop that no single module showed)."""
    parts: dict[str, set[str]] = defaultdict(set)
    for module, deps in project_graph().items():
        if not module.startswith("workers.science."):
            continue
        for dep in deps:
            if dep.startswith("workers.science.") and science_part(dep) != science_part(module):
                parts[science_part(module)].add(science_part(dep))
    assert find_cycle(parts) is None, " -> ".join(find_cycle(parts))
