"""Reading traces: downsampled series for charts, full data for export."""
from __future__ import annotations

import math
from dataclasses import dataclass

from django.db import connection, transaction

from opdweb.traces.models import ROLLUP_WIDTHS, TraceSeries

MAX_BUCKETS = 5000


@dataclass(frozen=True)
class Bucket:
    start: int  # first step covered (inclusive)
    end: int  # last step covered (inclusive)
    min: float
    max: float
    last_step: int
    last: float

    def as_list(self) -> list:
        return [self.start, self.end, self.min, self.max, self.last_step, self.last]


def choose_level(span: int, n_buckets: int) -> int:
    """The coarsest stored level whose bucket width still fits ``n_buckets`` into ``span``
    steps (0 = raw points).  Reading it costs fewer than ``w(L+1)/w(L) * n_buckets`` rows."""
    target = span / n_buckets
    level = 0
    while level + 1 < len(ROLLUP_WIDTHS) and ROLLUP_WIDTHS[level + 1] <= target:
        level += 1
    return level


def downsample(series: TraceSeries, n_buckets: int, start: int | None = None, end: int | None = None) -> dict:
    """At most ``n_buckets`` buckets of ``series`` over steps ``[start, end]`` (default: all).

    Bucket edges fall on multiples of the bucket width, and the window widens to whole
    buckets, so every min, max and last is exact for the steps its bucket reports: a
    spike anywhere in a bucket shows in that bucket.
    """
    n_buckets = max(1, min(int(n_buckets), MAX_BUCKETS))
    lo = series.first_step if start is None else max(int(start), series.first_step)
    hi = series.last_step if end is None else min(int(end), series.last_step)
    if hi < lo:
        return {"key": series.key, "level": 0, "bucket_steps": 1, "buckets": []}
    span = hi - lo + 1
    level = choose_level(span, n_buckets)
    width = ROLLUP_WIDTHS[level]
    # Output buckets are whole multiples of the stored width, aligned to them; the window
    # widens to whole buckets, which keeps every bucket's min / max / last exact.
    out_width = width * math.ceil(span / n_buckets / width)
    while hi // out_width - lo // out_width + 1 > n_buckets:
        out_width += width
    lo, hi = lo // out_width * out_width, (hi // out_width + 1) * out_width - 1
    with connection.cursor() as cursor:
        if level == 0:
            cursor.execute(
                "SELECT step, value, value, step, value FROM traces_tracepoint "
                "WHERE series_id = %s AND step BETWEEN %s AND %s ORDER BY step",
                [series.pk, lo, hi],
            )
        else:
            cursor.execute(
                "SELECT bucket * %s, min, max, last_step, last_value FROM traces_tracerollup "
                "WHERE series_id = %s AND level = %s AND bucket BETWEEN %s AND %s ORDER BY bucket",
                [width, series.pk, level, lo // width, hi // width],
            )
        rows = cursor.fetchall()
    buckets: list[Bucket] = []
    current = None
    for first, vmin, vmax, last_step, last_value in rows:
        index = first // out_width
        if current is None or current[0] != index:
            if current is not None:
                buckets.append(_bucket(current, out_width))
            current = [index, vmin, vmax, last_step, last_value]
        else:
            current[1] = min(current[1], vmin)
            current[2] = max(current[2], vmax)
            if last_step >= current[3]:
                current[3], current[4] = last_step, last_value
    if current is not None:
        buckets.append(_bucket(current, out_width))
    return {
        "key": series.key,
        "level": level,
        "bucket_steps": out_width,
        "buckets": [b.as_list() for b in buckets],
    }


def _bucket(acc, out_width: int) -> Bucket:
    index, vmin, vmax, last_step, last_value = acc
    return Bucket(index * out_width, (index + 1) * out_width - 1, vmin, vmax, last_step, last_value)


def iter_points(job_id: int, keys: list[str] | None = None, chunk: int = 5000):
    """Every point of a job as ``(key, step, wall_time, value)`` in (key, step) order,
    optionally of some keys only.  A server-side cursor keeps memory flat for any size;
    yields lists of up to ``chunk`` rows."""
    sql = (
        "SELECT s.key, p.step, p.wall_time, p.value FROM traces_tracepoint p "
        "JOIN traces_traceseries s ON s.id = p.series_id "
        "WHERE s.job_id = %s AND (%s::text[] IS NULL OR s.key = ANY(%s::text[])) "
        "ORDER BY s.key, p.step"
    )
    with transaction.atomic():
        connection.ensure_connection()
        with connection.connection.cursor(name=f"trace_export_{job_id}") as raw:
            raw.itersize = chunk
            raw.execute(sql, [job_id, keys or None, keys or None])
            while rows := raw.fetchmany(chunk):
                yield rows


def series_of(job_id: int) -> list[tuple[int, str]]:
    return list(TraceSeries.objects.filter(job_id=job_id).order_by("key").values_list("pk", "key"))


def points_after(series_id: int, after_step: int, limit: int) -> list[tuple[int, float, float]]:
    """Up to ``limit`` points of a series with step > ``after_step``, as (step, wall, value):
    one short keyset page, so a long replay holds neither memory nor a transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT step, wall_time, value FROM traces_tracepoint WHERE series_id = %s AND step > %s ORDER BY step LIMIT %s",
            [series_id, after_step, limit],
        )
        return cursor.fetchall()
