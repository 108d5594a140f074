"""Child jobs: a job that fans work out (a calibration's training runs) names each piece as a
:class:`ChildJob` and iterates :func:`run_children` for the results as they finish.

Where the reporter can run children itself (the web product's reporter has
``run_children``: each child is a job of its own on the queue, so several workers share the
work, and a child is created once per key, so a parent restarted after a worker loss finds
the children it already made) the pieces run there; otherwise (the command line) they run
here, one after the other, in this process.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from .reporting import Cancelled, Reporter, SubReporter


@dataclass(frozen=True)
class ChildJob:
    key: str  # unique within the parent: the same key is the same child
    kind: str
    config: dict
    label: str = ""


class ChildFailed(RuntimeError):
    pass


def run_children(reporter: Reporter, children: Iterable[ChildJob]) -> Iterator[tuple[ChildJob, dict]]:
    """Each child with its result, in the order they finish; raises :class:`ChildFailed`
    when one fails and :class:`Cancelled` when the parent is asked to stop."""
    children = list(children)
    keys = [c.key for c in children]
    if len(set(keys)) != len(keys):
        raise ValueError("child keys must be unique")
    runner = getattr(reporter, "run_children", None)
    if runner is not None:
        yield from runner(children)
        return
    from .config import ConfigError
    from .entrypoints import get_kind

    for child in children:
        if reporter.should_stop():
            raise Cancelled(f"stopped before {child.label or child.key}")
        kind = get_kind(child.kind)
        try:
            result = kind.run(kind.config.model_validate(child.config), SubReporter(reporter))
        except ConfigError as exc:
            raise ChildFailed(f"{child.label or child.key}: {exc}") from exc
        yield child, result
