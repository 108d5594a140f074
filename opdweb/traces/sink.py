"""The worker-side trace sink: batches points, writes them with binary COPY, keeps the
rollup pyramid current, then hands them to a ``publish`` callback for the live channel.

Timing.  A point added is written and published within ``flush_seconds`` (default 50 ms)
whatever the logging rate, even if nothing is added after it: a writer thread owns the
flushes.  The first point after a quiet spell goes out at once; while points keep coming,
a flush starts at most every ``flush_seconds`` (or as soon as ``flush_points`` wait), so
batches grow with the rate and stay cheap.  The writer thread writes on its own database
connection (Django's are per thread) and closes it when the sink closes.  A sink made
inside an open transaction (a test, a management command wrapping its work in one)
cannot hand its points to another connection, which would not see the job row nor honour
the transaction; it flushes in the caller instead, from ``add`` and ``flush``.

Cost per point.  ``add`` is a few list operations per call, whatever the number of keys
(:mod:`opdweb.traces.pending`); a flush turns the calls into arrays, encodes the COPY
stream in whole-array operations, and reduces the rollup pyramid level from level.

Writes are replay-safe.  Points COPY straight into their table inside a savepoint; if any
already exists (a requeued job re-emitting its steps) the batch goes through a staging
table with ``ON CONFLICT DO NOTHING`` instead.  Rollup buckets that start after a
series' previous last step cannot exist yet and are COPYed directly; the few that may
(the bucket a flush continues, or any bucket of a replay) merge with least / greatest /
latest-step, which changes nothing when replayed.

Publishing.  One message per flush (split past ``LIVE_MESSAGE_POINTS``) carrying, per
key, its points in step order as packed little-endian columns: the keys, their point
counts, and the steps (int64), wall times and values (float64) as bytes (the format and
its numpy-free reader: :mod:`opdweb.traces.live_format`).  Encoding is a
``tobytes`` per column, no Python object per point; the consumer unpacks the columns,
drops what its client already has, and writes the JSON.  Publishing happens after the
commit, so a consumer that replays from the database after joining the group misses
nothing.

Statistics.  With autovacuum off or slow, the planner would see trace tables as they
were when last analysed; after a sink has written ``ANALYZE_CHECK_ROWS`` rows, and when it
closes, it compares the rows changed since the last ANALYZE (PostgreSQL's count, or what
it wrote itself, whichever is larger) with autovacuum's own threshold (50 rows + 10 % of
the table) and analyses the tables that crossed it, from the publishing thread.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable, Iterable, Mapping

import numpy as np
import psycopg
from django.db import connection, transaction

from opdweb.traces.models import ROLLUP_WIDTHS, TraceSeries
from opdweb.traces.pending import Arrays, PendingPoints

log = logging.getLogger(__name__)

POINTS_TABLE = "traces_tracepoint"
ROLLUP_TABLE = "traces_tracerollup"
#: The largest step a trace may have: every step is exact as a double (a browser's numbers;
#: the reads compare steps as float8 to find each bucket's last value).
MAX_STEP = 2**53 - 1
SERIES_TABLE = TraceSeries._meta.db_table
# A live message carries at most this many points (about 24 bytes each on the channel
# layer); a larger flush is split into several messages.
LIVE_MESSAGE_POINTS = 20_000
# After this many rows written, the sink checks whether its tables need ANALYZE.
ANALYZE_CHECK_ROWS = 200_000
ANALYZE_TABLES = (POINTS_TABLE, ROLLUP_TABLE, SERIES_TABLE)
# Batches waiting to be published beyond this are not published (liveness only).
MAX_UNPUBLISHED = 64
# The writer thread closes its database connection after this long with nothing to write.
IDLE_CLOSE_SECONDS = 2.0

Publish = Callable[[list[dict]], None]

# PostgreSQL binary COPY: signature, flags, header extension; each tuple is a field
# count followed by (length, big-endian value) per field; -1 ends the stream.
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
_COPY_TRAILER = b"\xff\xff"
_PG_TYPES = {"int8": (">i8", 8), "int2": (">i2", 2), "float8": (">f8", 8)}


def encode_binary_copy(columns: list[tuple[str, np.ndarray]]) -> memoryview:
    """The whole ``COPY ... FROM STDIN (FORMAT BINARY)`` stream for parallel columns of
    ``(pg_type, array)``, in one buffer filled by whole-array operations: every row's
    field count and lengths are one row pattern broadcast over the rows, then each column
    goes into its field (byte-swapped on the way).  No Python object per row, and no copy
    of the buffer afterwards."""
    n = len(columns[0][1])
    fields = [("count", ">i2")]
    for i, (pg_type, _) in enumerate(columns):
        fields += [(f"len{i}", ">i4"), (f"val{i}", _PG_TYPES[pg_type][0])]
    row = np.zeros(1, dtype=np.dtype(fields))
    row["count"] = len(columns)
    for i, (pg_type, _) in enumerate(columns):
        row[f"len{i}"] = _PG_TYPES[pg_type][1]
    stream = np.empty(len(_COPY_SIGNATURE) + n * row.itemsize + len(_COPY_TRAILER), dtype=np.uint8)
    stream[: len(_COPY_SIGNATURE)] = np.frombuffer(_COPY_SIGNATURE, dtype=np.uint8)
    stream[len(stream) - len(_COPY_TRAILER):] = np.frombuffer(_COPY_TRAILER, dtype=np.uint8)
    body = stream[len(_COPY_SIGNATURE): len(stream) - len(_COPY_TRAILER)]
    body.reshape(n, row.itemsize)[:] = row.view(np.uint8)
    rows = body.view(row.dtype)
    for i, (_, values) in enumerate(columns):
        rows[f"val{i}"] = values
    return memoryview(stream)


def copy_into(cursor, table: str, names: Iterable[str], data: bytes | memoryview) -> None:
    with cursor.copy(f"COPY {table} ({', '.join(names)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(data)


def live_messages(arrays: Arrays) -> list[dict]:
    """The live messages for one flush: per key, its points in strictly increasing step
    order (a replayed step keeps its first value, as the table does), packed as columns."""
    keys, counts, steps, walls, values = [], [], [], [], []
    for key, (s, w, v) in arrays.items():
        if len(s) > 1 and not bool((s[1:] > s[:-1]).all()):
            s, first = np.unique(s, return_index=True)
            w, v = w[first], v[first]
        keys.append(key)
        counts.append(len(s))
        steps.append(s)
        walls.append(w)
        values.append(v)
    steps_all = np.concatenate(steps).astype("<i8", copy=False)
    walls_all = np.concatenate(walls).astype("<f8", copy=False)
    values_all = np.concatenate(values).astype("<f8", copy=False)
    messages, begin = [], 0
    message = _new_live_message()
    for key, count in zip(keys, counts):
        done = 0
        while done < count:
            take = min(count - done, LIVE_MESSAGE_POINTS - message["n"])
            message["keys"].append(key)
            message["counts"].append(take)
            message["n"] += take
            done += take
            if message["n"] == LIVE_MESSAGE_POINTS:
                messages.append(_pack(message, steps_all, walls_all, values_all, begin))
                begin += message["n"]
                message = _new_live_message()
    if message["n"]:
        messages.append(_pack(message, steps_all, walls_all, values_all, begin))
    return messages


def _new_live_message() -> dict:
    return {"keys": [], "counts": [], "n": 0}


def _pack(message: dict, steps, walls, values, begin: int) -> dict:
    end = begin + message["n"]
    return {
        "type": "trace.points",
        "keys": message["keys"],
        "counts": message["counts"],
        "steps": steps[begin:end].tobytes(),
        "walls": walls[begin:end].tobytes(),
        "values": values[begin:end].tobytes(),
    }


def check_steps(first: int, last: int) -> None:
    if first < 0:
        raise ValueError("trace steps start at 0")
    if last > MAX_STEP:
        raise ValueError(f"trace steps end at 2**53 - 1 ({MAX_STEP:,}); got {last:,}")


class TraceSink:
    """Buffers points for one job and writes them in batches.

    ``flush_seconds`` bounds how long a point waits before it is written and published;
    ``flush_points`` starts a flush early when that many points wait.  ``publish`` is
    called with the live messages after each committed flush (``None``: no publishing),
    from a second thread so the writer goes on meanwhile.  :meth:`flush` returns once
    everything added is written; :meth:`close` also waits for the publishing, and stops
    both threads.  Call it at the end.
    """

    def __init__(self, job_id: int, *, flush_points: int = 20_000, flush_seconds: float = 0.05,
                 publish: Publish | None = None, analyze: bool = True):
        self.job_id = job_id
        self.flush_points = max(1, int(flush_points))
        self.flush_seconds = float(flush_seconds)
        self.publish = publish or None  # tolerates the older ``publish=False``
        self.analyze = analyze
        # A writer thread owns flushes, unless the caller holds a transaction its points
        # must stay inside (see the module docstring).
        self.threaded = self.flush_seconds > 0 and not connection.in_atomic_block
        # ``with self._lock`` (C-level) rather than ``with self._cond`` on the per-step path.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._pending = PendingPoints()
        self._oldest: float | None = None
        self._added = 0  # points ever added
        self._done = 0  # points ever taken by a finished write (or a failed one)
        self._flush_asked = False
        self._closing = False
        self._closed = False
        self._error: BaseException | None = None
        self._last_start = float("-inf")
        # Rows this sink wrote per table since it last ran ANALYZE on it, and since it
        # last checked (owned by the thread that publishes).
        self._unanalysed = {POINTS_TABLE: 0, ROLLUP_TABLE: 0, SERIES_TABLE: 0}
        self._since_check = 0
        self._thread: threading.Thread | None = None
        self._followup: queue.SimpleQueue | None = None
        if self.threaded:
            # Publishing and ANALYZE run after each commit in a second thread, so the
            # writer goes on with the next batch meanwhile.
            self._followup = queue.SimpleQueue()
            self._followup_thread = threading.Thread(target=self._follow_up, name=f"trace-sink-{job_id}-live",
                                                     daemon=True)
            self._followup_thread.start()
            self._thread = threading.Thread(target=self._writer, name=f"trace-sink-{job_id}", daemon=True)
            self._thread.start()

    def __len__(self) -> int:
        return self._pending.count

    # -- adding -------------------------------------------------------------------------

    def add(self, step: int, values: Mapping[str, float], wall_time: float | None = None) -> None:
        check_steps(step, step)
        wall = time.time() if wall_time is None else wall_time
        with self._lock:
            if self._error is not None or self._closing or self._closed:
                self._refuse_locked()
            self._added_locked(self._pending.add(step, wall, values))

    def add_many(self, key: str, steps, values, wall_times) -> None:
        """Bulk form for imports and benchmarks: one key, parallel sequences."""
        steps = list(steps)
        if steps:
            check_steps(min(steps), max(steps))
        with self._lock:
            if self._error is not None or self._closing or self._closed:
                self._refuse_locked()
            self._added_locked(self._pending.add_many(key, steps, values, wall_times))

    def _refuse_locked(self) -> None:
        self._raise_error()
        raise RuntimeError("this trace sink is closed")

    def _added_locked(self, n: int) -> None:
        if not n:
            return
        count = self._pending.count
        self._added += n
        if not self.threaded:
            now = time.monotonic()
            if self._oldest is None:
                self._oldest = now
            if count >= self.flush_points or now - self._oldest >= self.flush_seconds:
                self._flush_inline()
            return
        # Wake the writer when there is something new for it to decide on: the first
        # points after it emptied the buffer, or the buffer reaching ``flush_points``.
        # Not on every add past that: a busy writer looks at the buffer again anyway.
        if count == n or count - n < self.flush_points <= count:
            self._cond.notify_all()
        # Back-pressure: a producer far faster than the database waits for the writer.
        while self._pending.count >= 8 * self.flush_points and not self._closing and self._error is None:
            self._cond.wait(0.5)

    # -- flushing -----------------------------------------------------------------------

    def flush(self) -> int:
        """Write (and publish) everything added so far; returns how many points that was."""
        if not self.threaded:
            with self._lock:
                self._raise_error()
                return self._flush_inline()
        with self._lock:
            target = self._added
            before = self._done
            self._flush_asked = True
            self._cond.notify_all()
            while self._done < target and self._error is None and self._thread.is_alive():
                self._cond.wait(0.5)
            self._raise_error()
            return self._done - before

    def close(self) -> None:
        """Write what is left, stop the writer thread and close its connection.  Raises
        the writer's error, if any batch failed, once."""
        if self._closed:
            return
        self._closed = True
        if self.threaded:
            with self._lock:
                self._closing = True
                self._cond.notify_all()
            self._thread.join()
            self._followup_thread.join()
        else:
            with self._lock:
                self._flush_inline()
            self._finish_analyze()
        with self._lock:
            self._raise_error()

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _take_locked(self) -> PendingPoints:
        pending, self._pending, self._oldest = self._pending, PendingPoints(), None
        return pending

    def _flush_inline(self) -> int:
        pending = self._take_locked()
        if pending.count:
            self._write(pending)
            self._done += pending.count
        return pending.count

    def _writer(self) -> None:
        """The writer thread: waits for points, flushes when they are due."""
        try:
            try:  # connect now, not when the first point is due
                connection.ensure_connection()
            except Exception:  # noqa: BLE001 - the first write will say what is wrong
                pass
            while True:
                with self._lock:
                    while True:
                        if self._pending.count:
                            if self._flush_asked or self._closing or self._pending.count >= self.flush_points:
                                break
                            wait = self._last_start + self.flush_seconds - time.monotonic()
                            if wait <= 0:
                                break
                            self._cond.wait(wait)
                        elif self._closing:
                            return
                        else:
                            self._flush_asked = False
                            # Idle: give the connection back rather than hold a session.
                            if not self._cond.wait(IDLE_CLOSE_SECONDS) and not self._pending.count:
                                connection.close()
                    self._last_start = time.monotonic()
                    self._flush_asked = False
                    pending = self._take_locked()
                    self._cond.notify_all()  # a producer held back by back-pressure may go on
                try:
                    self._write(pending)
                except Exception as exc:  # noqa: BLE001 - handed to the caller
                    log.warning("trace sink of job %s: a batch of %s points failed", self.job_id, pending.count,
                                exc_info=True)
                    connection.close_if_unusable_or_obsolete()
                    with self._lock:
                        self._error = self._error or exc
                finally:
                    with self._lock:
                        self._done += pending.count
                        self._cond.notify_all()
        finally:
            self._finish_analyze()
            self._followup.put(None)
            connection.close()

    def _follow_up(self) -> None:
        """The second thread: publishes committed batches in order, runs ANALYZE."""
        try:
            while (item := self._followup.get()) is not None:
                self._after_commit(*item)
        finally:
            connection.close()

    def _after_commit(self, what: str, arg=None) -> None:
        try:
            if what == "publish":
                self.publish(live_messages(arg))
            elif what == "written":
                for table, rows in arg.items():
                    self._unanalysed[table] += rows
                    self._since_check += rows
                if self._since_check >= ANALYZE_CHECK_ROWS:
                    self._check_statistics()
            elif what == "closing" and self._since_check:
                self._check_statistics()
        except Exception:  # noqa: BLE001 - liveness and statistics only; the points are committed
            log.warning("trace sink of job %s: %s failed", self.job_id, what, exc_info=True)

    def _check_statistics(self) -> None:
        self._since_check = 0
        for table in analyze_if_needed(self._unanalysed):
            self._unanalysed[table] = 0

    def _then(self, what: str, arg=None) -> None:
        if self._followup is not None:
            self._followup.put((what, arg))
        else:
            self._after_commit(what, arg)

    def _write(self, pending: PendingPoints) -> None:
        """Write one batch (in whichever thread flushes); publishing follows the commit."""
        arrays = pending.arrays()
        written = write_points(self.job_id, arrays)
        if self.publish is not None:
            if self._followup is not None and self._followup.qsize() > MAX_UNPUBLISHED:
                # The channel cannot keep up: the database has the points, and a page
                # that reconnects gets them; memory stays bounded.
                log.warning("trace sink of job %s: live channel behind, %s points not published", self.job_id,
                            pending.count)
            else:
                self._then("publish", arrays)
        if self.analyze:
            self._then("written", written)

    def _finish_analyze(self) -> None:
        if self.analyze:
            self._then("closing")


def write_points(job_id: int, arrays: Arrays) -> dict[str, int]:
    """Write one batch, ``{key: (steps, wall_times, values)}``, in one transaction: the
    series rows, the points and the rollups.  Returns the rows written per table.

    The usual batch costs a handful of round trips: one statement claims the series, the
    points and the new rollup buckets go in by COPY, the buckets the batch continues merge
    in one statement.  A batch holding a step already stored (a replay) fails its COPY;
    the transaction is then redone through a staging table that skips what exists."""
    keys = list(arrays)
    firsts = [int(arrays[k][0].min()) for k in keys]
    lasts = [int(arrays[k][0].max()) for k in keys]
    # Each key's steps usually arrive in order: then the keys taken by series id already
    # give (series, step) order, with no sort.
    in_order = all(len(arrays[k][0]) < 2 or bool((arrays[k][0][1:] >= arrays[k][0][:-1]).all()) for k in keys)
    n = sum(len(arrays[k][0]) for k in keys)
    for replay in (False, True):
        try:
            with transaction.atomic(), connection.cursor() as wrapper:
                cursor = wrapper.cursor
                # (Series created by a failed first try were rolled back: ids are new.)
                ids, previous_last = _claim_series(cursor, job_id, keys, firsts, lasts)
                by_id = sorted(keys, key=ids.__getitem__)
                sid = np.repeat(np.asarray([ids[k] for k in by_id], dtype=np.int64), [len(arrays[k][0]) for k in by_id])
                steps, walls, values = (np.concatenate([arrays[k][i] for k in by_id]) for i in range(3))
                if not in_order:
                    # Rows go in by (series, step): the index takes them in runs, not
                    # interleaved across keys, and a series' points share heap pages.
                    order = np.lexsort((steps, sid))
                    sid, steps, walls, values = sid[order], steps[order], walls[order], values[order]
                _write_points(cursor, sid, steps, walls, values, replay)
                rollups = _write_rollups(cursor, sid, steps, values, {} if replay else previous_last, replay)
            return {POINTS_TABLE: n, ROLLUP_TABLE: rollups, SERIES_TABLE: len(keys)}
        except psycopg.errors.UniqueViolation:
            if replay:
                raise
    raise AssertionError("unreachable")


def analyze_if_needed(written: Mapping[str, int] | None = None) -> list[str]:
    """ANALYZE the trace tables that changed by more than autovacuum's own threshold
    (50 rows + 10 % of the table as last analysed) since their last analysis, whether or
    not autovacuum runs; returns the tables analysed.  The change is PostgreSQL's count
    or ``written`` (rows a caller knows it wrote since), whichever is larger: the
    statistics collector reports with a delay.  A table another session is analysing
    already is skipped, not waited for."""
    written = written or {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, greatest(c.reltuples, 0), coalesce(s.n_mod_since_analyze, 0) FROM pg_class c "
            "LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
            "WHERE c.oid = ANY(ARRAY[%s::regclass, %s::regclass, %s::regclass])",
            list(ANALYZE_TABLES),
        )
        tables = [name for name, tuples, changed in cursor.fetchall()
                  if max(changed, written.get(name, 0)) > 50 + 0.1 * tuples]
        for table in tables:
            cursor.execute(f"ANALYZE (SKIP_LOCKED) {table}")
    return tables


def _claim_series(cursor, job_id: int, keys: list[str], firsts: list[int],
                  lasts: list[int]) -> tuple[dict[str, int], dict[int, int]]:
    """Series ids for every key, creating rows as needed and widening their step range,
    in one statement.  Also returns each existing series' last step *before* this batch,
    as the statement's snapshot saw it (the rollup fast path relies on it; a concurrent
    writer of the same series can only make a COPY collide, which redoes the batch as a
    replay).  The same
    statement turns off waiting for the WAL flush at commit: trace points are telemetry a
    job can replay, a database crash may lose the last fraction of a second of them, never
    corrupt them, and not waiting is what keeps many small batches cheap."""
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
            SELECT claimed.id, claimed.key, previous.last_step, set_config('synchronous_commit', 'off', true)
            FROM claimed LEFT JOIN previous USING (id)""",
        {"job": job_id, "keys": keys, "firsts": firsts, "lasts": lasts},
    )
    ids, previous_last = {}, {}
    for series_id, key, last_step, _ in cursor.fetchall():
        ids[key] = series_id
        if last_step is not None:
            previous_last[series_id] = last_step
    return ids, previous_last


POINT_COLUMNS = ("series_id", "step", "wall_time", "value")
ROLLUP_COLUMNS = ("series_id", "level", "bucket", "min", "max", "last_step", "last_value")


def _write_points(cursor, sid, steps, walls, values, replay: bool) -> None:
    data = encode_binary_copy([("int8", sid), ("int8", steps), ("float8", walls), ("float8", values)])
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


# Each level's buckets are whole buckets of the level below, so a level can be reduced
# from the one below it (min of minima, max of maxima, the last of the lasts).  NaN is
# ordered as PostgreSQL orders it (above every number), so every level agrees with an
# aggregate over the raw points: a NaN is a bucket's max, never its min (unless all are NaN).
assert all(wide % narrow == 0 for narrow, wide in zip(ROLLUP_WIDTHS, ROLLUP_WIDTHS[1:]))


def rollup_columns(sid: np.ndarray, steps: np.ndarray, values: np.ndarray,
                   presorted: bool = False) -> dict[str, np.ndarray]:
    """Min, max and last per (series, level, bucket) for one batch of points, for every
    stored level.  Sorted by (series, step) (unless ``presorted``), each level's groups
    are contiguous runs of the level below: level 1 is a ``reduceat`` over the points
    (level 0, one bucket per step), every higher one over the rows of the level below it,
    which are 1/32 of the points or fewer."""
    if not presorted:
        order = np.lexsort((steps, sid))
        sid, steps, values = sid[order], steps[order], values[order]
    parts: dict[str, list[np.ndarray]] = {name: [] for name in ROLLUP_COLUMNS}
    below = {"series_id": sid, "bucket": steps, "min": values, "max": values, "last_step": steps, "last_value": values}
    for level in range(1, len(ROLLUP_WIDTHS)):
        bucket = below["bucket"] // (ROLLUP_WIDTHS[level] // ROLLUP_WIDTHS[level - 1])
        series = below["series_id"]
        change = np.flatnonzero((series[1:] != series[:-1]) | (bucket[1:] != bucket[:-1])) + 1
        starts = np.concatenate(([0], change))
        ends = np.concatenate((change, [len(bucket)])) - 1
        below = {
            "series_id": series[starts],
            "bucket": bucket[starts],
            "min": np.fmin.reduceat(below["min"], starts),
            "max": np.maximum.reduceat(below["max"], starts),
            "last_step": below["last_step"][ends],
            "last_value": below["last_value"][ends],
        }
        for name, column in below.items():
            parts[name].append(column)
        parts["level"].append(np.full(len(starts), level, dtype=np.int16))
    return {name: np.concatenate(arrays) for name, arrays in parts.items()}


_ROLLUP_TYPES = ("int8", "int2", "int8", "float8", "float8", "int8", "float8")


def _merge_rollups(cursor, cols: dict[str, np.ndarray], mask: np.ndarray) -> None:
    """Merge rollup rows into existing ones (least, greatest, latest step): a no-op when
    replayed.  One statement, the rows passed as arrays."""
    cursor.execute(
        f"""INSERT INTO {ROLLUP_TABLE} AS r (series_id, level, bucket, min, max, last_step, last_value)
            SELECT * FROM unnest(%s::int8[], %s::int2[], %s::int8[], %s::float8[], %s::float8[], %s::int8[], %s::float8[])
            ON CONFLICT (series_id, level, bucket) DO UPDATE SET
              min = LEAST(r.min, EXCLUDED.min),
              max = GREATEST(r.max, EXCLUDED.max),
              last_value = CASE WHEN EXCLUDED.last_step >= r.last_step THEN EXCLUDED.last_value ELSE r.last_value END,
              last_step = GREATEST(r.last_step, EXCLUDED.last_step)""",
        [cols[name][mask].tolist() for name in ROLLUP_COLUMNS],
    )


def _write_rollups(cursor, sid, steps, values, previous_last: dict[int, int], replay: bool) -> int:
    cols = rollup_columns(sid, steps, values, presorted=True)
    if replay:
        _merge_rollups(cursor, cols, np.ones(len(cols["series_id"]), dtype=bool))
        return len(cols["series_id"])
    # A bucket that starts after its series' previous last step holds no earlier point,
    # so no row for it exists yet: COPY.  The others (the bucket a flush continues) merge.
    prev = np.full(len(cols["series_id"]), -1, dtype=np.int64)
    if previous_last:
        known = np.fromiter(previous_last.keys(), dtype=np.int64, count=len(previous_last))
        lasts = np.fromiter(previous_last.values(), dtype=np.int64, count=len(previous_last))
        order = np.argsort(known)
        known, lasts = known[order], lasts[order]
        at = np.minimum(np.searchsorted(known, cols["series_id"]), len(known) - 1)
        match = known[at] == cols["series_id"]
        prev[match] = lasts[at[match]]
    bucket_start = cols["bucket"] * np.asarray(ROLLUP_WIDTHS, dtype=np.int64)[cols["level"]]
    fresh = bucket_start > prev
    if fresh.any():
        copy_into(cursor, ROLLUP_TABLE, ROLLUP_COLUMNS,
                  encode_binary_copy([(t, cols[name][fresh]) for t, name in zip(_ROLLUP_TYPES, ROLLUP_COLUMNS)]))
    if not fresh.all():
        _merge_rollups(cursor, cols, ~fresh)
    return len(fresh)
