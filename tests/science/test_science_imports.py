"""No import loop among the science's sub-packages: each module of ``workers.science`` and
each of its sub-packages (``budget``, ``training``, ``engines``) taken as one node, every
import counted (a function's own included), as the layout test reads them."""
from tests.test_layout import find_cycle, project_graph


def science_node(module: str) -> str | None:
    """``workers.science.budget.calibration`` -> ``workers.science.budget``; None outside the science."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["workers", "science"] and len(parts) > 2 else None


def test_no_loop_between_science_sub_packages():
    graph: dict[str, set[str]] = {}
    for module, deps in project_graph().items():
        here = science_node(module)
        if here is None:
            continue
        graph.setdefault(here, set()).update(d for d in map(science_node, deps) if d is not None and d != here)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))
    assert "workers.science.entrypoints" not in graph["workers.science.children"]  # the runner is handed the lookup
