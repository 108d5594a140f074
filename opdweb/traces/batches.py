"""One batch of points written in one transaction: the series rows, the points and the
rollups.

Durability.  A batch written inside a caller's transaction (a request's: ``runs/log-batch``,
``runs/log-metric``, ``POST /api/runs/<id>/points``) commits as that transaction commits,
with ``synchronous_commit`` on: the answer comes once the points' WAL is on disk, so a
PostgreSQL crash after it loses none (MLflow's client never resends an answered batch).
A batch that is its own transaction (the worker's trace sink, which answers nobody) does
not wait for the WAL flush: a job's points are telemetry it can replay, a crash may lose
the last fraction of a second of them, never corrupt them, and not waiting is what keeps
many small batches cheap.  The job's end is committed synchronously, which flushes all
the WAL written before it, so a finished job's points are durable too.

Writes are replay-safe.  Points COPY straight into their table inside a savepoint; if any
already exists (a requeued job re-emitting its steps) the batch goes through a staging
table with ``ON CONFLICT DO NOTHING`` instead.  Rollup buckets that start after a
series' previous last step cannot exist yet and are COPYed directly; the few that may
(the bucket a flush continues, or any bucket of a replay) merge with least / greatest /
latest-step, which changes nothing when replayed.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import psycopg
from django.db import connection, transaction

from opdweb.traces.copy_encoding import copy_into, encode_binary_copy
from opdweb.traces.models import POINTS_TABLE, ROLLUP_TABLE, SERIES_TABLE
from opdweb.traces.pending import Arrays
from opdweb.traces.rollups import plan_rollups

POINT_COLUMNS = ("series_id", "step", "wall_time", "value")


def write_points(job_id: int, arrays: Arrays, copying: Callable[[], None] | None = None) -> dict[str, int]:
    """Write one batch, ``{key: (steps, wall_times, values)}``, in one transaction: the
    series rows, the points and the rollups.  Returns the rows written per table.

    The usual batch costs a handful of round trips: one statement claims the series, the
    points and the new rollup buckets go in by COPY, the buckets the batch continues merge
    in one statement.  A batch holding a step already stored (a replay) fails its COPY;
    the transaction is then redone through a staging table that skips what exists.

    ``copying`` is called once the points are encoded, as their COPY starts (the sink
    lets a producer it held back go on then, while PostgreSQL does the work)."""
    keys = list(arrays)
    firsts = [int(arrays[k][0].min()) for k in keys]
    lasts = [int(arrays[k][0].max()) for k in keys]
    # Each key's steps usually arrive in order: then the keys taken by series id already
    # give (series, step) order, with no sort.
    in_order = all(len(arrays[k][0]) < 2 or bool((arrays[k][0][1:] >= arrays[k][0][:-1]).all()) for k in keys)
    n = sum(len(arrays[k][0]) for k in keys)
    fast_commit = not connection.in_atomic_block  # only when the batch is its own transaction
    for replay in (False, True):
        try:
            with transaction.atomic(), connection.cursor() as wrapper:
                cursor = wrapper.cursor
                # (Series created by a failed first try were rolled back: ids are new.)
                ids, previous_last = _claim_series(cursor, job_id, keys, firsts, lasts, fast_commit)
                by_id = sorted(keys, key=ids.__getitem__)
                sid = np.repeat(np.asarray([ids[k] for k in by_id], dtype=np.int64), [len(arrays[k][0]) for k in by_id])
                steps, walls, values = (np.concatenate([arrays[k][i] for k in by_id]) for i in range(3))
                if not in_order:
                    # Rows go in by (series, step): the index takes them in runs, not
                    # interleaved across keys, and a series' points share heap pages.
                    order = np.lexsort((steps, sid))
                    sid, steps, walls, values = sid[order], steps[order], walls[order], values[order]
                rollups = plan_rollups(sid, steps, values, {} if replay else previous_last, replay)
                _write_points(cursor, sid, steps, walls, values, replay, copying)
                rows = rollups.write(cursor)
            return {POINTS_TABLE: n, ROLLUP_TABLE: rows, SERIES_TABLE: len(keys)}
        except psycopg.errors.UniqueViolation:
            if replay:
                raise
    raise AssertionError("unreachable")


def _claim_series(cursor, job_id: int, keys: list[str], firsts: list[int], lasts: list[int],
                  fast_commit: bool) -> tuple[dict[str, int], dict[int, int]]:
    """Series ids for every key, creating rows as needed and widening their step range,
    in one statement.  Also returns each existing series' last step *before* this batch,
    as the statement's snapshot saw it (the rollup fast path relies on it; a concurrent
    writer of the same series can only make a COPY collide, which redoes the batch as a
    replay).  With ``fast_commit`` the same statement
    turns off waiting for the WAL flush at commit (see the module docstring)."""
    no_wait = ", set_config('synchronous_commit', 'off', true)" if fast_commit else ""
    cursor.execute(
        f"""WITH previous AS (
                SELECT id, last_step FROM {SERIES_TABLE} WHERE job_id = %(job)s AND key = ANY(%(keys)s)),
            claimed AS (
                INSERT INTO {SERIES_TABLE} AS s (job_id, key, first_step, last_step)
                SELECT %(job)s, k, f, l FROM unnest(%(keys)s::text[], %(firsts)s::int8[], %(lasts)s::int8[]) AS u(k, f, l)
                ON CONFLICT (job_id, key) DO UPDATE SET
                  first_step = LEAST(s.first_step, EXCLUDED.first_step),
                  last_step = GREATEST(s.last_step, EXCLUDED.last_step)
                RETURNING id, key)
            SELECT claimed.id, claimed.key, previous.last_step{no_wait}
            FROM claimed LEFT JOIN previous USING (id)""",  # noqa: E501
        {"job": job_id, "keys": keys, "firsts": firsts, "lasts": lasts},
    )
    ids, previous_last = {}, {}
    for series_id, key, last_step, *_ in cursor.fetchall():
        ids[key] = series_id
        if last_step is not None:
            previous_last[series_id] = last_step
    return ids, previous_last


def _write_points(cursor, sid, steps, walls, values, replay: bool, copying: Callable[[], None] | None) -> None:
    data = encode_binary_copy([("int8", sid), ("int8", steps), ("float8", walls), ("float8", values)])
    if copying is not None:
        copying()
    if not replay:
        copy_into(cursor, POINTS_TABLE, POINT_COLUMNS, data)
        return
    cursor.execute(
        "CREATE TEMP TABLE IF NOT EXISTS trace_point_stage "
        "(series_id int8, step int8, wall_time float8, value float8) ON COMMIT DELETE ROWS"
    )
    copy_into(cursor, "trace_point_stage", POINT_COLUMNS, data)
    cursor.execute(
        f"INSERT INTO {POINTS_TABLE} (series_id, step, wall_time, value) "
        "SELECT DISTINCT ON (series_id, step) series_id, step, wall_time, value FROM trace_point_stage "
        "ORDER BY series_id, step ON CONFLICT (series_id, step) DO NOTHING"
    )
