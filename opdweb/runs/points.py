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

The points go through :class:`~opdweb.traces.sink.TraceSink` inside the request's
transaction (so it flushes in the caller), and are announced on the live channel once the
transaction commits.  The sink (and with it numpy) is imported at the first write, not when
the web process starts (``tests/architecture/test_web_imports.py``).
"""
from __future__ import annotations

import math
from collections.abc import Callable

from django.db import connection, transaction
from django.utils import timezone

from opdweb.jobs import live
from opdweb.jobs.models import JobLogEntry
from opdweb.runs.mlflow_requests import MetricIn
from opdweb.traces.models import POINTS_TABLE, SERIES_TABLE

# Conflicts named one by one in the job's log, per batch; the rest are counted.
NAMED_CONFLICTS = 5


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def stored_values(job_id: int, pairs: list[tuple[str, int]]) -> dict[tuple[str, int], float]:
    """The stored value of each ``(key, step)`` of ``pairs`` that has one.  A step past its
    series' last stored step cannot be stored (the usual case: a run logs forward), so only
    the others are looked up point by point."""
    if not pairs:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, last_step FROM {SERIES_TABLE} WHERE job_id = %s AND key = ANY(%s::text[])",
                       [job_id, sorted({key for key, _ in pairs})])
        last = dict(cursor.fetchall())
        maybe = [(key, step) for key, step in pairs if key in last and step <= last[key]]
        if not maybe:
            return {}
        keys, steps = zip(*maybe, strict=True)
        cursor.execute(
            f"SELECT s.key, p.step, p.value FROM {SERIES_TABLE} s "
            f"JOIN unnest(%s::text[], %s::int8[]) AS u(key, step) ON u.key = s.key "
            f"JOIN {POINTS_TABLE} p ON p.series_id = s.id AND p.step = u.step WHERE s.job_id = %s",
            [list(keys), list(steps), job_id],
        )
        return {(key, step): value for key, step, value in cursor.fetchall()}


def write_new_points(job_id: int, metrics: list[MetricIn],
                     derive: Callable[[list[MetricIn]], list[MetricIn]] | None = None) -> int:
    """Write the points of ``metrics`` that are new (see the module docstring); returns how
    many were written.  ``derive`` gives the product's own points computed from the new ones
    (a linked run's multiple, :mod:`.linking`), written with them, each once as well.  Call
    inside a transaction that holds the job's row."""
    assert connection.in_atomic_block, "the batch and its checks belong to one transaction"
    first: dict[tuple[str, int], MetricIn] = {}
    conflicts: list[tuple[MetricIn, float]] = []
    for m in metrics:
        kept = first.setdefault((m.key, m.step), m)
        if kept is not m and not _same(kept.value, m.value):
            conflicts.append((m, kept.value))
    stored = stored_values(job_id, list(first))
    fresh = []
    for pair, m in first.items():
        if pair not in stored:
            fresh.append(m)
        elif not _same(stored[pair], m.value):
            conflicts.append((m, stored[pair]))
    written = len(fresh)
    if derive is not None:
        derived = derive(fresh)
        stored_derived = stored_values(job_id, [(m.key, m.step) for m in derived])
        fresh += [m for m in derived if (m.key, m.step) not in stored_derived]
    if fresh:
        from opdweb.traces.sink import TraceSink

        sink = TraceSink(job_id, publish=lambda messages: transaction.on_commit(lambda: live.publish(job_id, messages)))
        by_key: dict[str, list[MetricIn]] = {}
        for m in fresh:
            by_key.setdefault(m.key, []).append(m)
        for key, points in by_key.items():
            sink.add_many(key, [m.step for m in points], [m.value for m in points],
                          [m.timestamp / 1000 for m in points])
        sink.close()
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
