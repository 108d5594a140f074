"""Child jobs: a job that fans work out (a calibration's training runs) names each piece as a
:class:`ChildJob` and iterates :func:`run_children` for the typed results as they finish.

The reporter runs the children.  The web product's reporter has ``run_children``: each
child is a job of its own on the queue, so several workers share the work, and a child is
created once per key, so a parent restarted after a worker loss finds the children it
already made.  Elsewhere (the command line, a test) :meth:`JobKind.run
<workers.science.entrypoints.JobKind.run>` wraps the reporter in a
:class:`LocalChildRunner`, which runs them here, one after the other.  The runner is handed
the kind registry's lookup, so this module imports no job kind: the registry imports the
kinds, the kinds import this, and nothing points back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol

from pydantic import BaseModel

from .config import ConfigError
from .reporting import Cancelled, Reporter, SubReporter


@dataclass(frozen=True)
class ChildJob:
    key: str  # unique within the parent: the same key is the same child
    kind: str  # a :class:`~.kinds.Kind`
    config: dict
    label: str = ""


class ChildFailed(RuntimeError):
    pass


class ChildKind(Protocol):
    """What running a child needs of its kind (:class:`~.entrypoints.JobKind` is one)."""

    @property
    def config(self) -> type[BaseModel]: ...

    def run(self, config: BaseModel, reporter: Reporter | None = None, **options: Any) -> BaseModel: ...


class LocalChildRunner:
    """A reporter that runs child jobs in this process, one after the other, forwarding
    everything else to ``reporter``; ``kind_of`` resolves a child's kind name."""

    def __init__(self, reporter: Reporter, kind_of: Callable[[str], ChildKind]) -> None:
        self.reporter = reporter
        self.kind_of = kind_of

    def log(self, step: int, values: Mapping[str, float]) -> None:
        self.reporter.log(step, values)

    def progress(self, frac: float, message: str = "") -> None:
        self.reporter.progress(frac, message)

    def should_stop(self) -> bool:
        return self.reporter.should_stop()

    def flush(self) -> None:
        flush = getattr(self.reporter, "flush", None)
        if flush is not None:
            flush()

    def run_children(self, children: list[ChildJob]) -> Iterator[tuple[ChildJob, BaseModel]]:
        for child in children:
            if self.should_stop():
                raise Cancelled(f"stopped before {child.label or child.key}")
            kind = self.kind_of(child.kind)
            try:
                result = kind.run(kind.config.model_validate(child.config), SubReporter(self.reporter))
            except ConfigError as exc:
                raise ChildFailed(f"{child.label or child.key}: {exc}") from exc
            yield child, result


def run_children(reporter: Reporter, children: Iterable[ChildJob]) -> Iterator[tuple[ChildJob, Any]]:
    """Each child with its typed result, in the order they finish; raises
    :class:`ChildFailed` when one fails and :class:`Cancelled` when the parent is asked to
    stop.  ``reporter`` must run children (see the module docstring)."""
    children = list(children)
    keys = [c.key for c in children]
    if len(set(keys)) != len(keys):
        raise ValueError("child keys must be unique")
    runner = getattr(reporter, "run_children", None)
    if runner is None:
        raise TypeError("this reporter cannot run child jobs: run the job through its kind "
                        "(workers.science.entrypoints.get_kind(name).run), which runs them in this process")
    yield from runner(children)


__all__ = ["ChildFailed", "ChildJob", "ChildKind", "LocalChildRunner", "run_children"]
