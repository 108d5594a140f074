"""The worker-side trace sink: batches points, writes them with COPY, keeps the rollup
pyramid current, then announces them on the live channel.

Writes are replay-safe: the fast path COPYs straight into the points table inside a
savepoint; if any point already exists (a requeued job re-emitting its steps), the batch
goes through a staging table with ``ON CONFLICT DO NOTHING`` instead.  Rollups merge with
least / greatest / latest-step, so replaying them changes nothing.
"""
from __future__ import annotations

import time
from typing import Mapping

import numpy as np
import psycopg
from django.db import connection, transaction

from opdweb.jobs import live
from opdweb.traces.models import ROLLUP_BASE, ROLLUP_LEVELS, TraceSeries

POINTS_TABLE = "traces_tracepoint"
ROLLUP_TABLE = "traces_tracerollup"
# Live messages carry at most this many points; far below the channel layer's limits.
LIVE_CHUNK_POINTS = 500


class TraceSink:
    """Buffers ``(key, step, wall_time, value)`` points for one job and writes them in batches.

    ``flush_points`` / ``flush_seconds`` bound how much and how long a point waits;
    ``publish`` turns live announcement on or off (benchmarks compare both).
    """

    def __init__(self, job_id: int, *, flush_points: int = 20_000, flush_seconds: float = 0.25, publish: bool = True):
        self.job_id = job_id
        self.flush_points = flush_points
        self.flush_seconds = flush_seconds
        self.publish = publish
        self._series: dict[str, int] = {}
        self._keys: list[str] = []
        self._steps: list[int] = []
        self._walls: list[float] = []
        self._values: list[float] = []
        self._oldest = None

    def __len__(self) -> int:
        return len(self._steps)

    def add(self, step: int, values: Mapping[str, float], wall_time: float | None = None) -> None:
        wall = time.time() if wall_time is None else wall_time
        for key, value in values.items():
            self._keys.append(key)
            self._steps.append(int(step))
            self._walls.append(wall)
            self._values.append(float(value))
        if self._oldest is None:
            self._oldest = time.monotonic()
        if len(self._steps) >= self.flush_points or time.monotonic() - self._oldest >= self.flush_seconds:
            self.flush()

    def add_many(self, key: str, steps, values, wall_times) -> None:
        """Bulk form for imports and benchmarks: one key, parallel sequences."""
        n = len(steps)
        self._keys.extend([key] * n)
        self._steps.extend(int(s) for s in steps)
        self._walls.extend(float(w) for w in wall_times)
        self._values.extend(float(v) for v in values)
        if self._oldest is None:
            self._oldest = time.monotonic()
        if len(self._steps) >= self.flush_points:
            self.flush()

    def flush(self) -> int:
        """Write everything buffered; returns the number of points written (or replayed)."""
        if not self._steps:
            return 0
        keys, steps, walls, values = self._keys, self._steps, self._walls, self._values
        self._keys, self._steps, self._walls, self._values, self._oldest = [], [], [], [], None

        with transaction.atomic():
            series_ids = self._series_ids(keys, steps)
            sid = np.fromiter((series_ids[k] for k in keys), dtype=np.int64, count=len(keys))
            step_arr = np.asarray(steps, dtype=np.int64)
            value_arr = np.asarray(values, dtype=np.float64)
            with connection.cursor() as cursor:
                raw = cursor.cursor
                _write_points(raw, sid, step_arr, walls, value_arr)
                _write_rollups(raw, sid, step_arr, value_arr)
        if self.publish:
            self._announce(keys, steps, walls, values)
        return len(steps)

    def close(self) -> None:
        self.flush()

    def _series_ids(self, keys: list[str], steps: list[int]) -> dict[str, int]:
        """Ids for every key in the batch, creating series rows as needed; widens each
        series' [first_step, last_step]."""
        bounds: dict[str, list[int]] = {}
        for key, step in zip(keys, steps):
            b = bounds.get(key)
            if b is None:
                bounds[key] = [step, step]
            elif step < b[0]:
                b[0] = step
            elif step > b[1]:
                b[1] = step
        rows = [(self.job_id, key, lo, hi) for key, (lo, hi) in bounds.items()]
        with connection.cursor() as cursor:
            cursor.cursor.executemany(
                f"""INSERT INTO {TraceSeries._meta.db_table} (job_id, key, first_step, last_step)
                    VALUES (%s, %s, %s, %s)
                    ON CONFLICT (job_id, key) DO UPDATE SET
                      first_step = LEAST({TraceSeries._meta.db_table}.first_step, EXCLUDED.first_step),
                      last_step = GREATEST({TraceSeries._meta.db_table}.last_step, EXCLUDED.last_step)
                    RETURNING id, key""",
                rows,
                returning=True,
            )
            raw = cursor.cursor
            while True:
                row = raw.fetchone()
                if row is not None:
                    self._series[row[1]] = row[0]
                if not raw.nextset():
                    break
        return self._series

    def _announce(self, keys, steps, walls, values) -> None:
        points = [[k, s, w, v] for k, s, w, v in zip(keys, steps, walls, values)]
        messages = [
            {"type": "trace.points", "points": points[i : i + LIVE_CHUNK_POINTS]}
            for i in range(0, len(points), LIVE_CHUNK_POINTS)
        ]
        live.publish(self.job_id, messages)


def _copy_points(cursor, table: str, sid, steps, walls, values) -> None:
    with cursor.copy(f"COPY {table} (series_id, step, wall_time, value) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["int8", "int8", "float8", "float8"])
        for row in zip(sid.tolist(), steps.tolist(), walls, values.tolist()):
            copy.write_row(row)


def _write_points(cursor, sid, steps, walls, values) -> None:
    try:
        with cursor.connection.transaction():  # savepoint: a conflict rolls back only this
            _copy_points(cursor, POINTS_TABLE, sid, steps, walls, values)
    except psycopg.errors.UniqueViolation:
        cursor.execute(
            "CREATE TEMP TABLE IF NOT EXISTS trace_point_stage "
            "(series_id int8, step int8, wall_time float8, value float8)"
        )
        _copy_points(cursor, "trace_point_stage", sid, steps, walls, values)
        cursor.execute(
            f"INSERT INTO {POINTS_TABLE} (series_id, step, wall_time, value) "
            "SELECT DISTINCT ON (series_id, step) series_id, step, wall_time, value FROM trace_point_stage "
            "ON CONFLICT (series_id, step) DO NOTHING"
        )
        cursor.execute("TRUNCATE trace_point_stage")


def rollup_rows(sid: np.ndarray, steps: np.ndarray, values: np.ndarray):
    """Min, max and last per (series, level, bucket) for one batch of points.

    Yields ``(series_id, level, bucket, min, max, last_step, last_value)`` for every
    level 1..ROLLUP_LEVELS.  Sorting once by (series, step) makes every level's groups
    contiguous, so each level is a ``reduceat`` over the same arrays.
    """
    order = np.lexsort((steps, sid))
    sid, steps, values = sid[order], steps[order], values[order]
    for level in range(1, ROLLUP_LEVELS + 1):
        bucket = steps // (ROLLUP_BASE**level)
        change = np.flatnonzero((np.diff(sid) != 0) | (np.diff(bucket) != 0)) + 1
        starts = np.concatenate(([0], change))
        ends = np.concatenate((change, [len(steps)])) - 1
        mins = np.minimum.reduceat(values, starts)
        maxs = np.maximum.reduceat(values, starts)
        yield from zip(
            sid[starts].tolist(),
            [level] * len(starts),
            bucket[starts].tolist(),
            mins.tolist(),
            maxs.tolist(),
            steps[ends].tolist(),
            values[ends].tolist(),
        )


def _write_rollups(cursor, sid, steps, values) -> None:
    cursor.execute(
        "CREATE TEMP TABLE IF NOT EXISTS trace_rollup_stage (series_id int8, level int2, bucket int8, "
        "min float8, max float8, last_step int8, last_value float8)"
    )
    with cursor.copy(
        "COPY trace_rollup_stage (series_id, level, bucket, min, max, last_step, last_value) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["int8", "int2", "int8", "float8", "float8", "int8", "float8"])
        for row in rollup_rows(sid, steps, values):
            copy.write_row(row)
    cursor.execute(
        f"""INSERT INTO {ROLLUP_TABLE} AS r (series_id, level, bucket, min, max, last_step, last_value)
            SELECT series_id, level, bucket, min, max, last_step, last_value FROM trace_rollup_stage
            ON CONFLICT (series_id, level, bucket) DO UPDATE SET
              min = LEAST(r.min, EXCLUDED.min),
              max = GREATEST(r.max, EXCLUDED.max),
              last_value = CASE WHEN EXCLUDED.last_step >= r.last_step THEN EXCLUDED.last_value ELSE r.last_value END,
              last_step = GREATEST(r.last_step, EXCLUDED.last_step)"""
    )
    cursor.execute("TRUNCATE trace_rollup_stage")
