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
    assert "workers.science.entrypoints" not in parts["workers.science.children"]  # the runner is handed the lookup


def kind_names() -> set[str]:
    """The values of :class:`workers.science.kinds.Kind`, read from its source (no import)."""
    tree = ast.parse((ROOT / "workers" / "science" / "kinds.py").read_text())
    return {node.value.value for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def kind_literals(path: Path, names: set[str]) -> list[str]:
    """Places in ``path`` that spell a job kind's name as a string where a kind is meant:
    ``job.kind == "train"``, ``kind="admission"``, ``kind in ("a", "b")``."""
    def is_name(node) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            names_kind = any(isinstance(s, ast.Attribute) and s.attr == "kind"
                             or isinstance(s, ast.Name) and s.id == "kind" for s in sides)
            if names_kind and any(isinstance(c, ast.Constant) and c.value in names for s in sides for c in ast.walk(s)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        elif isinstance(node, ast.keyword) and node.arg in ("kind", "name") and is_name(node.value):
            found.append(f"{path.relative_to(ROOT)}:{node.value.lineno}")
        elif isinstance(node, ast.Dict):
            found += [f"{path.relative_to(ROOT)}:{v.lineno}" for k, v in zip(node.keys, node.values, strict=True)
                      if isinstance(k, ast.Constant) and k.value == "kind" and is_name(v)]
        elif isinstance(node, ast.Assign) and is_name(node.value) and all(
                isinstance(t, ast.Name) and t.id.isupper() for t in node.targets):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ChildJob" and len(node.args) > 1 \
                and is_name(node.args[1]):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_kind_names_are_spelled_once():
    """Every comparison with a kind, every ``kind=`` and every registration names a
    :class:`~workers.science.kinds.Kind` member, never the string."""
    names = kind_names()
    assert "admission" in names and "time-to-quality" in names
    places = [place for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
              if "migrations" not in path.parts and path.name != "kinds.py" for place in kind_literals(path, names)]
    templates = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "templates").rglob("*.html"))
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if "kind ==" in line and any(f'"{name}"' in line for name in names)]
    spelled = places + templates
    assert not spelled, "kind names spelled outside workers/science/kinds.py: " + ", ".join(spelled)


# Django apps by domain (ARCHITECTURE.md): each holds its models, views, API and tasks.
DOMAIN_APPS = ("teams", "registry", "rollouts", "jobs", "traces", "budgets", "approvals", "health")
TRAINERS = ("vllm", "verl", "prime_rl", "slime")


def test_every_domain_has_its_app_and_each_trainer_its_export_module():
    settings = (ROOT / "opdweb" / "settings.py").read_text()
    for app in DOMAIN_APPS:
        assert (ROOT / "opdweb" / app / "apps.py").exists(), f"opdweb/{app}/ is not an app"
        assert f'"opdweb.{app}' in settings, f"opdweb.{app} is not in INSTALLED_APPS"
    assert not (ROOT / "opdweb" / "configs").exists(), "opdweb/configs/ was split into rollouts, approvals, exports"
    for trainer in TRAINERS:
        assert (ROOT / "opdweb" / "exports" / f"{trainer}.py").exists(), f"no export module for {trainer}"


def test_the_budget_over_training_is_computed_in_one_place():
    """One ``budget_at`` (workers/science/verdicts.py), used by the training re-check
    and the run watch alike: two formulas for one question gave 100x and 505x at one step."""
    defined = [str(path.relative_to(ROOT)) for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.FunctionDef) and node.name == "budget_at"]
    assert defined == ["workers/science/verdicts.py"], defined
    users = {module_name(p) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
             if "workers.science.verdicts" in imports_of(p)}
    assert {"opdweb.runs.watch", "workers.science.training.recheck"} <= users, users
