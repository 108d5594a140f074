"""The one reporter interface every piece of science reports through.

A long computation calls ``log(step, {key: value})`` for trace points,
``progress(frac, message)`` for the progress bar, and polls ``should_stop()`` between
units of work so a cancel from the web is honoured cooperatively.  The Celery side
implements it on top of PostgreSQL and the channel layer; the command line implements it
with a progress bar; tests use :class:`RecordingReporter`.
"""
from __future__ import annotations

import sys
from typing import Any, Mapping, Protocol


class Cancelled(Exception):
    """Raised by science code when ``should_stop()`` turned true."""


class Reporter(Protocol):
    def log(self, step: int, values: Mapping[str, float]) -> None: ...

    def progress(self, frac: float, message: str = "") -> None: ...

    def should_stop(self) -> bool: ...

    def flush(self) -> None:
        """Make every point logged so far durable.  Called before a checkpoint is committed:
        a run resumed from it logs only the steps after it, so the ones before must be stored."""


class GrowingPlan:
    """Progress over work whose plan grows as it runs (a calibration adds seeds and levels
    as its results come in), as a fraction that never goes back: when work is added, the
    part of the bar not yet filled is spread over everything still to do, so the bar slows
    down instead of jumping back (``done / planned`` would fall from 5/6 to 6/12).  It stays
    below ``ceiling`` until the caller reports the end itself."""

    def __init__(self, ceiling: float = 0.99) -> None:
        self.ceiling = ceiling
        self.done = self.planned = 0
        self._base = 0.0  # the fraction shown when the plan last grew
        self._base_done = 0  # runs done then

    def grow(self, runs: int) -> None:
        self._base, self._base_done = self.fraction, self.done
        self.planned += runs

    def finished_one(self) -> float:
        self.done += 1
        return self.fraction

    @property
    def fraction(self) -> float:
        span = self.planned - self._base_done
        if span <= 0:
            return self._base
        return min(self.ceiling, self._base + (1 - self._base) * (self.done - self._base_done) / span)


class NullReporter:
    """Discards everything; never asks to stop."""

    def log(self, step: int, values: Mapping[str, float]) -> None:
        pass

    def progress(self, frac: float, message: str = "") -> None:
        pass

    def should_stop(self) -> bool:
        return False

    def flush(self) -> None:
        pass


class SubReporter(NullReporter):
    """The reporter of a run inside a job (a child run in process, a sub-measurement): it
    stops when the job is asked to stop, and keeps its traces and progress apart."""

    def __init__(self, parent: "Reporter") -> None:
        self.parent = parent

    def should_stop(self) -> bool:
        return self.parent.should_stop()


class RecordingReporter(NullReporter):
    """Keeps every call, for tests and for callers that want the series in memory."""

    def __init__(self, stop_after_logs: int | None = None) -> None:
        self.points: list[tuple[int, str, float]] = []
        self.progress_calls: list[tuple[float, str]] = []
        self._stop_after_logs = stop_after_logs
        self._logs = 0

    def log(self, step: int, values: Mapping[str, float]) -> None:
        self._logs += 1
        self.points.extend((step, key, float(value)) for key, value in values.items())

    def progress(self, frac: float, message: str = "") -> None:
        self.progress_calls.append((frac, message))

    def should_stop(self) -> bool:
        return self._stop_after_logs is not None and self._logs >= self._stop_after_logs


class ConsoleReporter(NullReporter):
    """A progress bar on stderr for the command line (quiet when stderr is not a TTY)."""

    def __init__(self, enabled: bool | None = None) -> None:
        self._enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bar: Any = None

    def progress(self, frac: float, message: str = "") -> None:
        if not self._enabled:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=1000, file=sys.stderr, leave=False)
        bar = self._bar
        bar.n = int(max(0.0, min(1.0, frac)) * 1000)
        bar.set_description(message, refresh=False)
        bar.refresh()
        if frac >= 1.0:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
