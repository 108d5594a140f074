"""Reading traces: downsampled series for charts, full data for export."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cached_property

from django.db import DEFAULT_DB_ALIAS, connection, connections

from opdweb.traces.models import ROLLUP_WIDTHS, TraceSeries

MAX_BUCKETS = 5000
#: A read may return as few as this share of the buckets asked for, when that lets it read a
#: coarser level: a 1 % zoom of 1M steps gives 625 buckets of 16 steps from 625 stored rows,
#: rather than 1,000 buckets of 10 from 10,000 raw points.
MIN_BUCKET_SHARE = 0.5


def choose_level(span: int, n_buckets: int) -> int:
    """The coarsest stored level that still gives ``span`` steps at least
    ``MIN_BUCKET_SHARE * n_buckets`` buckets (0 = raw points).  The next level gives fewer,
    so reading this one costs fewer than ``w(L+1)/w(L) * MIN_BUCKET_SHARE * n_buckets``
    rows: 4 per bucket asked at a rollup level, 8 from the raw points."""
    target = span / (MIN_BUCKET_SHARE * n_buckets)
    level = 0
    while level + 1 < len(ROLLUP_WIDTHS) and ROLLUP_WIDTHS[level + 1] <= target:
        level += 1
    return level


@dataclass(frozen=True)
class Downsampled:
    """A downsampled read.  PostgreSQL writes the buckets as JSON text (an array of
    ``[start, end, min, max, last_step, last]`` arrays, then the wall time of ``last_step``
    if asked), so an API answer sends them without decoding 6,000 numbers in Python and
    encoding them again.  Floats are written shortest-exact, so they decode to the stored
    values; NaN and infinities come as the strings "NaN", "Infinity" and "-Infinity"."""

    key: str
    level: int
    bucket_steps: int
    buckets_json: str

    @cached_property
    def buckets(self) -> list[list]:
        return json.loads(self.buckets_json)

    def json(self) -> str:
        """The API's ``DownsampledOut`` document."""
        return (f'{{"key": {json.dumps(self.key)}, "level": {self.level}, "bucket_steps": {self.bucket_steps}, '
                f'"buckets": {self.buckets_json}}}')


def downsample(series: TraceSeries, n_buckets: int, start: int | None = None, end: int | None = None,
               wall: bool = False) -> Downsampled:
    """At most ``n_buckets`` buckets of ``series`` over steps ``[start, end]`` (default: all).

    Bucket edges fall on multiples of the bucket width, and the window widens to whole
    buckets, so every min, max and last is exact for the steps its bucket reports: a
    spike anywhere in a bucket shows in that bucket.  PostgreSQL does the bucketing (one
    GROUP BY over the chosen level's rows, at most 8 of them per bucket returned) and
    writes the buckets as JSON; each is ``[start, end, min, max, last_step, last]``, and with
    ``wall`` the wall time of ``last_step`` after them (for time axes: from the points
    themselves at the raw level, by one primary-key lookup per bucket from a rollup level;
    a few ms per read, so only when asked).
    """
    plan = read_plan(series, n_buckets, start, end, wall)
    if plan is None:
        return Downsampled(series.key, 0, 1, "[]")
    with connection.cursor() as cursor:
        cursor.execute(plan.sql, plan.params)
        buckets_json = cursor.fetchone()[0]
    return Downsampled(series.key, plan.level, plan.bucket_steps, buckets_json)


@dataclass(frozen=True)
class ReadPlan:
    """The one statement a downsampled read runs: its level, output bucket width, SQL and
    parameters (benchmarks/bench_reads.py times it alone in PostgreSQL, the reads' floor)."""

    level: int
    bucket_steps: int
    sql: str
    params: dict


def read_plan(series: TraceSeries, n_buckets: int, start: int | None = None, end: int | None = None,
              wall: bool = False) -> ReadPlan | None:
    """What :func:`downsample` runs for these arguments; None for an empty window."""
    n_buckets = max(1, min(int(n_buckets), MAX_BUCKETS))
    lo = series.first_step if start is None else max(int(start), series.first_step)
    hi = series.last_step if end is None else min(int(end), series.last_step)
    if hi < lo:
        return None
    level, out_width = bucket_width(hi - lo + 1, n_buckets, lo, hi)
    lo, hi = lo // out_width * out_width, (hi // out_width + 1) * out_width - 1
    if level == 0:
        return ReadPlan(0, out_width, _JSON_QUERIES["raw", wall],
                        {"w": out_width, "series": series.pk, "lo": lo, "hi": hi})
    width = ROLLUP_WIDTHS[level]
    return ReadPlan(level, out_width, _JSON_QUERIES["rollup", wall],
                    {"w": out_width, "k": out_width // width, "series": series.pk, "level": level,
                     "lo": lo // width, "hi": hi // width})


def bucket_width(span: int, n_buckets: int, lo: int, hi: int) -> tuple[int, int]:
    """``(level, output bucket width)`` for a window ``[lo, hi]`` of ``span`` steps: the
    stored level from :func:`choose_level`, and the smallest multiple of its width whose
    aligned buckets covering the window number at most ``n_buckets`` (its own width when
    that already gives fewer)."""
    level = choose_level(span, n_buckets)
    width = ROLLUP_WIDTHS[level]
    out_width = width * math.ceil(span / n_buckets / width)
    while hi // out_width - lo // out_width + 1 > n_buckets:
        out_width += width
    return level, out_width


# The last value of a bucket is the one at its greatest step: max() over arrays led by the
# step keeps it in one pass, with no sort (steps are unique in a series, and exact as
# float8 up to the sink's MAX_STEP, so the step alone decides).  NaN sorts above every
# number in min() and max(), as in the rollups the sink writes.
_RAW_BUCKETS = """
    SELECT b * %(w)s AS first, b * %(w)s + %(w)s - 1 AS last, min(value) AS lo, max(value) AS hi,
           max(step) AS last_step, (max(ARRAY[step::float8, value]))[2] AS last_value
    FROM (SELECT step / %(w)s AS b, step, value FROM traces_tracepoint
          WHERE series_id = %(series)s AND step BETWEEN %(lo)s AND %(hi)s) AS p
    GROUP BY b"""

_RAW_BUCKETS_WALL = """
    SELECT first, last, lo, hi, last_step, last_row[2] AS last_value, last_row[3] AS wall_time FROM (
        SELECT b * %(w)s AS first, b * %(w)s + %(w)s - 1 AS last, min(value) AS lo, max(value) AS hi,
               max(step) AS last_step, max(ARRAY[step::float8, value, wall_time]) AS last_row
        FROM (SELECT step / %(w)s AS b, step, value, wall_time FROM traces_tracepoint
              WHERE series_id = %(series)s AND step BETWEEN %(lo)s AND %(hi)s) AS p
        GROUP BY b) AS g"""

_ROLLUP_BUCKETS = """
    SELECT b * %(w)s AS first, b * %(w)s + %(w)s - 1 AS last, min(min) AS lo, max(max) AS hi,
           max(last_step) AS last_step, (max(ARRAY[last_step::float8, last_value]))[2] AS last_value
    FROM (SELECT bucket / %(k)s AS b, min, max, last_step, last_value FROM traces_tracerollup
          WHERE series_id = %(series)s AND level = %(level)s AND bucket BETWEEN %(lo)s AND %(hi)s) AS r
    GROUP BY b"""

# Rollups keep no wall times: each output bucket looks its last step's up by primary key
# (LATERAL, so PostgreSQL probes the index per bucket instead of joining the series' points).
_ROLLUP_BUCKETS_WALL = f"""
    SELECT r.*, w.wall_time FROM ({_ROLLUP_BUCKETS}) AS r
    CROSS JOIN LATERAL (SELECT wall_time FROM traces_tracepoint
                        WHERE series_id = %(series)s AND step = r.last_step) AS w"""


def _as_json(buckets_sql: str, wall: bool) -> str:
    """One JSON array of the buckets a query returns (columns named as in the queries
    above), in step order; text, so the driver passes it through undecoded."""
    columns = "first, last, lo, hi, last_step, last_value" + (", wall_time" if wall else "")
    return (f"SELECT coalesce(json_agg(json_build_array({columns}) ORDER BY first), '[]')::text "
            f"FROM ({buckets_sql}) AS d")


# (level kind, wall) -> the statement a read runs.
_JSON_QUERIES = {
    ("raw", False): _as_json(_RAW_BUCKETS, False),
    ("raw", True): _as_json(_RAW_BUCKETS_WALL, True),
    ("rollup", False): _as_json(_ROLLUP_BUCKETS, False),
    ("rollup", True): _as_json(_ROLLUP_BUCKETS_WALL, True),
}


def iter_points(job_id: int, keys: list[str] | None = None, chunk: int = 5000):
    """Every point of a job as ``(key, step, wall_time, value)`` in (key, step) order,
    optionally of some keys only.  A server-side cursor keeps memory flat for any size;
    yields lists of up to ``chunk`` rows.

    The cursor lives in a transaction on a database connection of its own, never on the
    thread's: under ASGI one thread runs every request's sync code, so a transaction held
    open on its connection between chunks would take in the writes of whatever requests
    ran there meanwhile (uncommitted until the export ends, rolled back if it breaks).  The
    generator may be resumed and closed from any thread."""
    sql = (
        "SELECT s.key, p.step, p.wall_time, p.value FROM traces_tracepoint p "
        "JOIN traces_traceseries s ON s.id = p.series_id "
        "WHERE s.job_id = %s AND (%s::text[] IS NULL OR s.key = ANY(%s::text[])) "
        "ORDER BY s.key, p.step"
    )
    own = connections.create_connection(DEFAULT_DB_ALIAS)
    own.inc_thread_sharing()
    try:
        own.ensure_connection()
        raw = own.connection
        with raw.transaction(), raw.cursor(name=f"trace_export_{job_id}") as cursor:
            cursor.itersize = chunk
            cursor.execute(sql, [job_id, keys or None, keys or None])
            while rows := cursor.fetchmany(chunk):
                yield rows
    finally:
        own.close()
        own.dec_thread_sharing()


def series_of(job_id: int) -> list[tuple[int, str]]:
    return list(TraceSeries.objects.filter(job_id=job_id).order_by("key").values_list("pk", "key"))


def points_after(series_id: int, after_step: int, limit: int) -> list[tuple[int, float, float]]:
    """Up to ``limit`` points of a series with step > ``after_step``, as (step, wall, value):
    one short keyset page, so a long replay holds neither memory nor a transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT step, wall_time, value FROM traces_tracepoint "
            "WHERE series_id = %s AND step > %s ORDER BY step LIMIT %s",
            [series_id, after_step, limit],
        )
        return cursor.fetchall()
