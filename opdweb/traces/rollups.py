"""The rollup pyramid of one batch: min, max and last per (series, level, bucket),
reduced level from level, and written new by COPY or merged where a bucket may exist."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opdweb.traces.copy_encoding import copy_into, encode_binary_copy
from opdweb.traces.models import ROLLUP_TABLE, ROLLUP_WIDTHS

ROLLUP_COLUMNS = ("series_id", "level", "bucket", "min", "max", "last_step", "last_value")


# Each level's buckets are whole buckets of the level below, so a level can be reduced
# from the one below it (min of minima, max of maxima, the last of the lasts).  NaN is
# ordered as PostgreSQL orders it (above every number), so every level agrees with an
# aggregate over the raw points: a NaN is a bucket's max, never its min (unless all are NaN).
assert all(wide % narrow == 0 for narrow, wide in zip(ROLLUP_WIDTHS, ROLLUP_WIDTHS[1:], strict=False))


def rollup_columns(sid: np.ndarray, steps: np.ndarray, values: np.ndarray,
                   presorted: bool = False) -> dict[str, np.ndarray]:
    """Min, max and last per (series, level, bucket) for one batch of points, for every
    stored level.  Sorted by (series, step) (unless ``presorted``), each level's groups
    are contiguous runs of the level below: level 1 is a ``reduceat`` over the points
    (level 0, one bucket per step), every higher one over the rows of the level below it,
    which are 1/16 of the points or fewer."""
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


def _merge_rollups(cursor, cols: dict[str, np.ndarray]) -> None:
    """Merge rollup rows into existing ones (least, greatest, latest step): a no-op when
    replayed.  One statement, the rows passed as arrays."""
    cursor.execute(
        f"""INSERT INTO {ROLLUP_TABLE} AS r (series_id, level, bucket, min, max, last_step, last_value)
            SELECT * FROM unnest(%s::int8[], %s::int2[], %s::int8[], %s::float8[], %s::float8[], %s::int8[], %s::float8[])
            ON CONFLICT (series_id, level, bucket) DO UPDATE SET
              min = LEAST(r.min, EXCLUDED.min),
              max = GREATEST(r.max, EXCLUDED.max),
              last_value = CASE WHEN EXCLUDED.last_step >= r.last_step THEN EXCLUDED.last_value ELSE r.last_value END,
              last_step = GREATEST(r.last_step, EXCLUDED.last_step)""",  # noqa: E501
        [cols[name].tolist() for name in ROLLUP_COLUMNS],
    )


@dataclass
class RollupWrite:
    """One batch's rollup rows, computed and encoded before anything is sent (so the
    sink does that work while PostgreSQL can still wait for it), then written by
    :meth:`write` in the batch's transaction."""

    rows: int
    new: memoryview | None  # the binary COPY of the buckets that cannot exist yet
    merged: dict[str, np.ndarray] | None  # the buckets that may exist: merged in one statement

    def write(self, cursor) -> int:
        if self.new is not None:
            copy_into(cursor, ROLLUP_TABLE, ROLLUP_COLUMNS, self.new)
        if self.merged is not None:
            _merge_rollups(cursor, self.merged)
        return self.rows


def plan_rollups(sid, steps, values, previous_last: dict[int, int], replay: bool) -> RollupWrite:
    """The rollup rows of one batch sorted by (series, step), and how each goes in: a
    replay merges every bucket; otherwise a bucket that starts after its series' previous
    last step holds no earlier point, so no row for it exists yet (COPY), and the others
    (the bucket a flush continues) merge."""
    cols = rollup_columns(sid, steps, values, presorted=True)
    rows = len(cols["series_id"])
    if replay:
        return RollupWrite(rows, None, cols)
    prev = np.full(rows, -1, dtype=np.int64)
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
    new = None
    if fresh.any():
        new = encode_binary_copy([(pg_type, cols[name][fresh])
                                  for pg_type, name in zip(_ROLLUP_TYPES, ROLLUP_COLUMNS, strict=True)])
    merged = None if fresh.all() else {name: column[~fresh] for name, column in cols.items()}
    return RollupWrite(rows, new, merged)
