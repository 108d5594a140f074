"""A batch's metrics into the job's traces, each point once.

A point's identity is ``(run, key, step)``: the trace store keeps one value per step of a
series (``(series, step)`` is its key, so a replay cannot duplicate), and MLflow's client
sends ``step=0`` when the caller gives none.  So:

- a point whose ``(key, step)`` is stored already is not written again: a resent batch
  (a retry after a timeout, a trainer replaying steps after a restart) changes nothing;
- the first value for a step stays, as for every job's replays; a different value sent
  later for that step (or twice in one batch) is not stored, and the job's log says so,
  naming the key, the step and both values (logging without a step lands every value on
  step 0, where only the first stays: pass ``step``);
- NaN and ±Infinity are stored as the trace store stores them (charts and exports read
  them back as NaN / Infinity); the wall time is the metric's timestamp.

A batch is held per key (:class:`KeyPoints`, parallel lists), the shape the trace sink
takes: a key whose steps rise past its series' last stored step, the usual case for a run
logging forward, is written without looking up a single point.

The points go through :class:`~opdweb.traces.sink.TraceSink` inside the request's
transaction (so it flushes in the caller), and are announced on the live channel once the
transaction commits.  The sink (and with it numpy) is imported at the first write, not when
the web process starts (``tests/architecture/test_web_imports.py``).
"""
from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass

from django.db import connection, transaction
from django.utils import timezone

from opdweb.jobs import live
from opdweb.jobs.models import JobLogEntry
from opdweb.runs.mlflow_requests import MetricIn
from opdweb.traces.models import POINTS_TABLE, SERIES_TABLE

# Conflicts named one by one in the job's log, per batch; the rest are counted.
NAMED_CONFLICTS = 5


class _Statistics:
    """Rows this process's batches wrote since it last checked the trace tables' statistics:
    a sink per request would check at every close (a catalogue query per batch), so the
    batches check once per ``ANALYZE_CHECK_ROWS`` rows instead, as one long-lived sink does."""

    unchecked = 0
    lock = threading.Lock()

    @classmethod
    def wrote(cls, rows: int) -> None:
        from opdweb.traces.analyze import ANALYZE_CHECK_ROWS, analyze_if_needed

        with cls.lock:
            cls.unchecked += rows
            due, cls.unchecked = (cls.unchecked, 0) if cls.unchecked >= ANALYZE_CHECK_ROWS else (0, cls.unchecked)
        if due:
            transaction.on_commit(lambda: analyze_if_needed({POINTS_TABLE: due}))


@dataclass
class KeyPoints:
    """One key's points of a batch, in the order sent."""

    key: str
    steps: list[int]
    values: list[float]
    timestamps: list[int]  # unix ms

    def metrics(self) -> list[MetricIn]:
        return [MetricIn(self.key, v, t, s) for s, v, t in zip(self.steps, self.values, self.timestamps, strict=True)]

    def taking(self, indices: list[int]) -> KeyPoints:
        return KeyPoints(self.key, [self.steps[i] for i in indices], [self.values[i] for i in indices],
                         [self.timestamps[i] for i in indices])


def series_of(metrics: list[MetricIn]) -> list[KeyPoints]:
    """``metrics`` grouped by key, in the order each key first appears."""
    by_key: dict[str, KeyPoints] = {}
    for m in metrics:
        points = by_key.get(m.key)
        if points is None:
            points = by_key[m.key] = KeyPoints(m.key, [], [], [])
        points.steps.append(m.step)
        points.values.append(m.value)
        points.timestamps.append(m.timestamp)
    return list(by_key.values())


def metrics_of(series: list[KeyPoints], keys: Collection[str]) -> list[MetricIn]:
    """The points of the keys in ``keys``, one by one (for the few keys read point by point)."""
    return [m for points in series if points.key in keys for m in points.metrics()]


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _first_per_step(points: KeyPoints, conflicts: list[tuple[MetricIn, float]]) -> KeyPoints:
    """``points`` with one point per step, the first sent (steps that rise need no look)."""
    steps = points.steps
    if all(a < b for a, b in itertools.pairwise(steps)):
        return points
    first: dict[int, int] = {}
    for i, step in enumerate(steps):
        kept = first.setdefault(step, i)
        if kept != i and not _same(points.values[kept], points.values[i]):
            conflicts.append((MetricIn(points.key, points.values[i], points.timestamps[i], step),
                              points.values[kept]))
    return points.taking(sorted(first.values()))


def _not_stored(job_id: int, series: list[KeyPoints],
                conflicts: list[tuple[MetricIn, float]] | None) -> list[KeyPoints]:
    """The points of ``series`` (one per step and key) not stored yet; a stored step sent
    with another value goes to ``conflicts`` (when given).  A step past its series' last
    stored step cannot be stored, so only the others are looked up."""
    series = [points for points in series if points.steps]
    if not series:
        return []
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, last_step FROM {SERIES_TABLE} WHERE job_id = %s AND key = ANY(%s::text[])",
                       [job_id, [points.key for points in series]])
        last = dict(cursor.fetchall())
        maybe_keys: list[str] = []
        maybe_steps: list[int] = []
        for points in series:
            if points.key in last and min(points.steps) <= last[points.key]:
                for step in points.steps:
                    if step <= last[points.key]:
                        maybe_keys.append(points.key)
                        maybe_steps.append(step)
        if not maybe_keys:
            return series
        cursor.execute(
            f"SELECT s.key, p.step, p.value FROM {SERIES_TABLE} s "
            f"JOIN unnest(%s::text[], %s::int8[]) AS u(key, step) ON u.key = s.key "
            f"JOIN {POINTS_TABLE} p ON p.series_id = s.id AND p.step = u.step WHERE s.job_id = %s",
            [maybe_keys, maybe_steps, job_id],
        )
        stored: dict[tuple[str, int], float] = {(key, step): value for key, step, value in cursor.fetchall()}
    fresh = []
    for points in series:
        if points.key not in last or min(points.steps) > last[points.key]:
            fresh.append(points)
            continue
        keep = []
        for i, step in enumerate(points.steps):
            value = stored.get((points.key, step))
            if value is None:
                keep.append(i)
            elif conflicts is not None and not _same(value, points.values[i]):
                conflicts.append((MetricIn(points.key, points.values[i], points.timestamps[i], step), value))
        if keep:
            fresh.append(points.taking(keep))
    return fresh


def write_new_points(job_id: int, series: list[KeyPoints],
                     derive: Callable[[list[KeyPoints]], list[KeyPoints]] | None = None) -> int:
    """Write the points of ``series`` (one entry per key) that are new (see the module
    docstring); returns how many were written.  ``derive`` gives the product's own points
    computed from the new ones (a linked run's multiple, :mod:`.linking`), written with
    them, each once as well.  Call inside a transaction that holds the job's row."""
    assert connection.in_atomic_block, "the batch and its checks belong to one transaction"
    conflicts: list[tuple[MetricIn, float]] = []
    fresh = _not_stored(job_id, [_first_per_step(points, conflicts) for points in series], conflicts)
    written = sum(len(points.steps) for points in fresh)
    if derive is not None:
        fresh += _not_stored(job_id, derive(fresh), None)
    if fresh:
        from opdweb.traces.sink import TraceSink

        sink = TraceSink(job_id, publish=lambda messages: transaction.on_commit(lambda: live.publish(job_id, messages)),
                         analyze=False)
        for points in fresh:
            sink.add_many(points.key, points.steps, points.values, [t / 1000 for t in points.timestamps])
        sink.close()
        _Statistics.wrote(sum(len(points.steps) for points in fresh))
    if conflicts:
        _log_conflicts(job_id, conflicts)
    return written


def _log_conflicts(job_id: int, conflicts: list[tuple[MetricIn, float]]) -> None:
    named = "; ".join(f"{m.key!r} step {m.step}: kept {kept!r}, not {m.value!r}" for m, kept in
                      conflicts[:NAMED_CONFLICTS])
    more = f" (and {len(conflicts) - NAMED_CONFLICTS} more)" if len(conflicts) > NAMED_CONFLICTS else ""
    entry = JobLogEntry.objects.create(
        job_id=job_id, created_at=timezone.now(), level="WARNING",
        message=f"{len(conflicts)} logged values not stored: their step already had another value "
                f"(a point is one value per key and step; the first stays): {named}{more}")
    transaction.on_commit(lambda: live.publish_log(job_id, [entry]))
