"""The worker-side trace sink: batches points, writes them with binary COPY, keeps the
rollup pyramid current, then announces them on the live channel.

Writes are replay-safe.  Points COPY straight into their table inside a savepoint; if any
already exists (a requeued job re-emitting its steps) the batch goes through a staging
table with ``ON CONFLICT DO NOTHING`` instead.  Rollup buckets that start after a
series' previous last step cannot exist yet and are COPYed directly; the few that may
(the bucket a flush continues, or any bucket of a replay) merge with least / greatest /
latest-step, which changes nothing when replayed.
"""
from __future__ import annotations

import time
from typing import Iterable, Mapping

import numpy as np
import psycopg
from django.db import connection, transaction

from opdweb.jobs import live
from opdweb.traces.models import ROLLUP_WIDTHS, TraceSeries

POINTS_TABLE = "traces_tracepoint"
ROLLUP_TABLE = "traces_tracerollup"
SERIES_TABLE = TraceSeries._meta.db_table
# Live messages carry at most this many points; far below the channel layer's limits.
LIVE_CHUNK_POINTS = 500

# PostgreSQL binary COPY: signature, flags, header extension; each tuple is a field
# count followed by (length, big-endian value) per field; -1 ends the stream.
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
_COPY_TRAILER = b"\xff\xff"
_PG_TYPES = {"int8": (">i8", 8), "int2": (">i2", 2), "float8": (">f8", 8)}


def encode_binary_copy(columns: list[tuple[str, np.ndarray]]) -> bytes:
    """Rows for ``COPY ... FROM STDIN (FORMAT BINARY)`` from parallel columns of
    ``(pg_type, array)``, built in one vectorised pass instead of a Python loop per row."""
    n = len(columns[0][1])
    fields = [("count", ">i2")]
    for i, (pg_type, _) in enumerate(columns):
        fields += [(f"len{i}", ">i4"), (f"val{i}", _PG_TYPES[pg_type][0])]
    rows = np.empty(n, dtype=np.dtype(fields))
    rows["count"] = len(columns)
    for i, (pg_type, values) in enumerate(columns):
        rows[f"len{i}"] = _PG_TYPES[pg_type][1]
        rows[f"val{i}"] = values
    return _COPY_SIGNATURE + rows.tobytes() + _COPY_TRAILER


def copy_into(cursor, table: str, names: Iterable[str], data: bytes) -> None:
    with cursor.copy(f"COPY {table} ({', '.join(names)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(data)


class TraceSink:
    """Buffers points for one job and writes them in batches.

    ``flush_points`` / ``flush_seconds`` bound how much and how long a point waits;
    ``publish`` turns live announcement on or off (benchmarks measure both).
    """

    def __init__(self, job_id: int, *, flush_points: int = 20_000, flush_seconds: float = 0.25, publish: bool = True):
        self.job_id = job_id
        self.flush_points = flush_points
        self.flush_seconds = flush_seconds
        self.publish = publish
        self._buffer: dict[str, tuple[list[int], list[float], list[float]]] = {}
        self._count = 0
        self._oldest: float | None = None

    def __len__(self) -> int:
        return self._count

    def add(self, step: int, values: Mapping[str, float], wall_time: float | None = None) -> None:
        wall = time.time() if wall_time is None else wall_time
        buffer = self._buffer
        for key, value in values.items():
            columns = buffer.get(key)
            if columns is None:  # not setdefault: that would build three lists per point
                columns = buffer[key] = ([], [], [])
            columns[0].append(step)
            columns[1].append(wall)
            columns[2].append(value)
        self._count += len(values)
        self._maybe_flush()

    def add_many(self, key: str, steps, values, wall_times) -> None:
        """Bulk form for imports and benchmarks: one key, parallel sequences."""
        columns = self._buffer.get(key)
        if columns is None:
            columns = self._buffer[key] = ([], [], [])
        columns[0].extend(steps)
        columns[1].extend(wall_times)
        columns[2].extend(values)
        self._count += len(steps)
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        now = time.monotonic()
        if self._oldest is None:
            self._oldest = now
        if self._count >= self.flush_points or now - self._oldest >= self.flush_seconds:
            self.flush()

    def flush(self) -> int:
        """Write everything buffered; returns the number of points written (or replayed)."""
        if not self._count:
            return 0
        buffer, count = self._buffer, self._count
        self._buffer, self._count, self._oldest = {}, 0, None
        arrays = {
            key: (np.asarray(steps, dtype=np.int64), np.asarray(walls, dtype=np.float64), np.asarray(vals, dtype=np.float64))
            for key, (steps, walls, vals) in buffer.items()
        }
        if any(int(steps.min()) < 0 for steps, _, _ in arrays.values()):
            raise ValueError("trace steps start at 0")
        with transaction.atomic(), connection.cursor() as wrapper:
            cursor = wrapper.cursor
            # Trace points are telemetry a job can replay: a database crash may lose the
            # last fraction of a second of them, never corrupt them; not waiting for the
            # WAL flush on every batch is what keeps many small batches cheap.
            cursor.execute("SET LOCAL synchronous_commit = off")
            ids, previous_last = self._claim_series(cursor, arrays)
            sid = np.concatenate([np.full(len(arrays[k][0]), ids[k], dtype=np.int64) for k in arrays])
            steps = np.concatenate([a[0] for a in arrays.values()])
            walls = np.concatenate([a[1] for a in arrays.values()])
            values = np.concatenate([a[2] for a in arrays.values()])
            _write_points(cursor, sid, steps, walls, values)
            _write_rollups(cursor, sid, steps, values, previous_last)
        if self.publish:
            self._announce(buffer)
        return count

    def close(self) -> None:
        self.flush()

    def _claim_series(self, cursor, arrays) -> tuple[dict[str, int], dict[int, int]]:
        """Series ids for every key, creating rows as needed and widening their step range.
        Also returns each existing series' last step *before* this batch (locked, so the
        rollup fast path can rely on it)."""
        keys = list(arrays)
        cursor.execute(
            f"SELECT id, last_step FROM {SERIES_TABLE} WHERE job_id = %s AND key = ANY(%s) FOR UPDATE",
            [self.job_id, keys],
        )
        previous_last = dict(cursor.fetchall())
        rows = [(self.job_id, key, int(arrays[key][0].min()), int(arrays[key][0].max())) for key in keys]
        cursor.executemany(
            f"""INSERT INTO {SERIES_TABLE} AS s (job_id, key, first_step, last_step) VALUES (%s, %s, %s, %s)
                ON CONFLICT (job_id, key) DO UPDATE SET
                  first_step = LEAST(s.first_step, EXCLUDED.first_step),
                  last_step = GREATEST(s.last_step, EXCLUDED.last_step)
                RETURNING id, key""",
            rows,
            returning=True,
        )
        ids = {}
        while True:
            for series_id, key in cursor.fetchall():
                ids[key] = series_id
            if not cursor.nextset():
                break
        return ids, previous_last

    def _announce(self, buffer) -> None:
        points = [
            [key, step, wall, value]
            for key, (steps, walls, vals) in buffer.items()
            for step, wall, value in zip(steps, walls, vals)
        ]
        points.sort(key=lambda p: p[1])
        messages = [
            {"type": "trace.points", "points": points[i : i + LIVE_CHUNK_POINTS]}
            for i in range(0, len(points), LIVE_CHUNK_POINTS)
        ]
        live.publish(self.job_id, messages)


POINT_COLUMNS = ("series_id", "step", "wall_time", "value")
ROLLUP_COLUMNS = ("series_id", "level", "bucket", "min", "max", "last_step", "last_value")


def _write_points(cursor, sid, steps, walls, values) -> None:
    data = encode_binary_copy([("int8", sid), ("int8", steps), ("float8", walls), ("float8", values)])
    try:
        with cursor.connection.transaction():  # savepoint: a conflict rolls back only this
            copy_into(cursor, POINTS_TABLE, POINT_COLUMNS, data)
    except psycopg.errors.UniqueViolation:
        cursor.execute(
            "CREATE TEMP TABLE IF NOT EXISTS trace_point_stage "
            "(series_id int8, step int8, wall_time float8, value float8)"
        )
        copy_into(cursor, "trace_point_stage", POINT_COLUMNS, data)
        cursor.execute(
            f"INSERT INTO {POINTS_TABLE} (series_id, step, wall_time, value) "
            "SELECT DISTINCT ON (series_id, step) series_id, step, wall_time, value FROM trace_point_stage "
            "ON CONFLICT (series_id, step) DO NOTHING"
        )
        cursor.execute("TRUNCATE trace_point_stage")


def rollup_columns(sid: np.ndarray, steps: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """Min, max and last per (series, level, bucket) for one batch of points, for every
    stored level.  Sorting once by (series, step) makes every level's groups
    contiguous, so each level is a ``reduceat`` over the same arrays."""
    order = np.lexsort((steps, sid))
    sid, steps, values = sid[order], steps[order], values[order]
    parts: dict[str, list[np.ndarray]] = {name: [] for name in ROLLUP_COLUMNS}
    for level in range(1, len(ROLLUP_WIDTHS)):
        bucket = steps // ROLLUP_WIDTHS[level]
        change = np.flatnonzero((np.diff(sid) != 0) | (np.diff(bucket) != 0)) + 1
        starts = np.concatenate(([0], change))
        ends = np.concatenate((change, [len(steps)])) - 1
        parts["series_id"].append(sid[starts])
        parts["level"].append(np.full(len(starts), level, dtype=np.int16))
        parts["bucket"].append(bucket[starts])
        parts["min"].append(np.minimum.reduceat(values, starts))
        parts["max"].append(np.maximum.reduceat(values, starts))
        parts["last_step"].append(steps[ends])
        parts["last_value"].append(values[ends])
    return {name: np.concatenate(arrays) for name, arrays in parts.items()}


def _encode_rollups(cols: dict[str, np.ndarray], mask: np.ndarray) -> bytes:
    types = ("int8", "int2", "int8", "float8", "float8", "int8", "float8")
    return encode_binary_copy([(t, cols[name][mask]) for t, name in zip(types, ROLLUP_COLUMNS)])


def _merge_rollups(cursor, data: bytes) -> None:
    cursor.execute(
        "CREATE TEMP TABLE IF NOT EXISTS trace_rollup_stage (series_id int8, level int2, bucket int8, "
        "min float8, max float8, last_step int8, last_value float8)"
    )
    copy_into(cursor, "trace_rollup_stage", ROLLUP_COLUMNS, data)
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


def _write_rollups(cursor, sid, steps, values, previous_last: dict[int, int]) -> None:
    cols = rollup_columns(sid, steps, values)
    # A bucket that starts after its series' previous last step holds no earlier point,
    # so no row for it exists yet.
    prev = np.array([previous_last.get(int(s), -1) for s in cols["series_id"]], dtype=np.int64) if previous_last else \
        np.full(len(cols["series_id"]), -1, dtype=np.int64)
    bucket_start = cols["bucket"] * np.asarray(ROLLUP_WIDTHS, dtype=np.int64)[cols["level"]]
    fresh = bucket_start > prev
    if fresh.any():
        data = _encode_rollups(cols, fresh)
        try:
            with cursor.connection.transaction():
                copy_into(cursor, ROLLUP_TABLE, ROLLUP_COLUMNS, data)
        except psycopg.errors.UniqueViolation:
            _merge_rollups(cursor, data)
    if not fresh.all():
        _merge_rollups(cursor, _encode_rollups(cols, ~fresh))
