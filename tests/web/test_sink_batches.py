"""What the sink builds for one batch, against independently computed answers: each key's
points in the order they were added whatever keys they were logged with, the rollup
pyramid reduced level from level equal to brute force over the points, and rollups
merged over many small flushes equal to brute force over the whole series."""
import random

import numpy as np
import pytest

from opdweb.traces.models import ROLLUP_WIDTHS, TracePoint, TraceRollup, TraceSeries
from opdweb.traces.pending import PendingPoints
from opdweb.traces.rollups import rollup_columns
from opdweb.traces.sink import TraceSink
from tests.web.factories import JobFactory


def brute_force_rollups(points: dict[int, list[tuple[int, float]]]) -> set[tuple]:
    """Every (series, level, bucket, min, max, last_step, last_value), one point at a time."""
    rows = {}
    for series, pts in points.items():
        for step, value in sorted(pts):
            for level in range(1, len(ROLLUP_WIDTHS)):
                key = (series, level, step // ROLLUP_WIDTHS[level])
                lo, hi, _, _ = rows.get(key, (value, value, None, None))
                rows[key] = (min(lo, value), max(hi, value), step, value)
    return {key + row for key, row in rows.items()}


def test_it_hands_each_key_its_points_in_the_order_they_were_added():
    pending = PendingPoints()
    pending.add(0, 100.0, {"loss": 1.0, "lr": 0.1})
    pending.add(1, 101.0, {"loss": 2.0})
    pending.add(1, 101.5, {"lr": 0.2, "loss": 3.0})  # the same keys as the first, another order
    pending.add(2, 102.0, {})
    pending.add_many("loss", [5, 4], [4.0, 5.0], [104.0, 103.0])
    pending.add(6, 106.0, {"loss": 6.0, "lr": 0.3})
    assert pending.count == 9
    got = {key: [a.tolist() for a in arrays] for key, arrays in pending.arrays().items()}
    assert got == {
        "loss": [[0, 1, 1, 5, 4, 6], [100.0, 101.0, 101.5, 104.0, 103.0, 106.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]],
        "lr": [[0, 1, 6], [100.0, 101.5, 106.0], [0.1, 0.2, 0.3]],
    }


def test_it_refuses_columns_of_different_lengths():
    with pytest.raises(ValueError):
        PendingPoints().add_many("loss", [0, 1], [1.0], [0.0, 0.0])


def test_rollups_reduced_level_from_level_equal_brute_force():
    rng = np.random.default_rng(3)
    points = {}
    for series in (3, 8, 11):
        steps = np.sort(rng.choice(5_000_000, size=int(rng.integers(1, 30_000)), replace=False))
        points[series] = list(zip(steps.tolist(), rng.normal(0, 1, len(steps)).round(4).tolist(), strict=True))
    sid = np.concatenate([np.full(len(p), s, dtype=np.int64) for s, p in points.items()])
    steps = np.asarray([st for p in points.values() for st, _ in p], dtype=np.int64)
    values = np.asarray([v for p in points.values() for _, v in p])
    shuffle = rng.permutation(len(sid))  # unsorted input: rollup_columns sorts it
    cols = rollup_columns(sid[shuffle], steps[shuffle], values[shuffle])
    got = set(zip(*(cols[name].tolist() for name in ("series_id", "level", "bucket", "min", "max", "last_step",
                                                   "last_value")), strict=True))
    assert len(got) == len(cols["series_id"])
    assert got == brute_force_rollups(points)


@pytest.mark.django_db
def test_rollups_after_many_small_flushes_equal_brute_force():
    """Many flushes of a few points each continue the same open buckets over and over (the
    merge path); the result must be what one pass over every point gives."""
    job = JobFactory()
    rng = random.Random(5)
    steps = sorted(rng.sample(range(3 * ROLLUP_WIDTHS[3]), 3_000))
    sink = TraceSink(job.pk, publish=None, flush_points=10**6)
    logged = {"a": [], "b": []}
    for step in steps:
        values = {"a": rng.uniform(-1, 1)}
        if rng.random() < 0.5:
            values["b"] = rng.uniform(-1, 1)
        sink.add(step, values)
        for key, value in values.items():
            logged[key].append((step, value))
        if rng.random() < 0.2:
            sink.flush()
    sink.close()
    series = dict(TraceSeries.objects.filter(job=job).values_list("key", "pk"))
    assert {key: list(TracePoint.objects.filter(series_id=series[key]).order_by("step").values_list("step", "value"))
            for key in logged} == logged
    stored = set(TraceRollup.objects.values_list("series_id", "level", "bucket", "min", "max", "last_step",
                                                 "last_value"))
    assert stored == brute_force_rollups({series[key]: pts for key, pts in logged.items()})
