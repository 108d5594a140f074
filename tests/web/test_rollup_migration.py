"""traces/0002 rebuilds every stored rollup at the new widths (16, 128, ... steps), and
going back rebuilds the old ones (32, 256, ...): both checked against buckets computed by
hand from the raw points, NaN and infinities included."""
import math
import random

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

import opdweb.traces.rollups
from opdweb.traces.models import TraceRollup
from opdweb.traces.sink import TraceSink
from tests.web.factories import JobFactory

OLD_WIDTHS = (1, 32, 256, 2048, 16384, 131072, 1048576)
NEW_WIDTHS = (1, 16, 128, 1024, 8192, 65536, 524288, 4194304)


def migrate(target: str) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([("traces", target)])


def migrate_to_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def same(value: float):
    """NaN compares unequal to itself: compare it as a word."""
    return "NaN" if math.isnan(value) else value


def by_hand(points: dict[int, list[tuple[int, float]]], widths) -> set[tuple]:
    """(series, level, bucket, min, max, last_step, last_value) for every level, as PostgreSQL
    orders NaN: above every number, so a bucket's max if it holds one, its min only if all are."""
    rows = set()
    for series, pts in points.items():
        for level in range(1, len(widths)):
            buckets: dict[int, list[tuple[int, float]]] = {}
            for step, value in pts:
                buckets.setdefault(step // widths[level], []).append((step, value))
            for bucket, inside in buckets.items():
                values = [v for _, v in inside]
                numbers = [v for v in values if not math.isnan(v)]
                low = min(numbers) if numbers else math.nan
                high = math.nan if len(numbers) < len(values) else max(numbers)
                last_step, last_value = max(inside)
                rows.add((series, level, bucket, same(low), same(high), last_step, same(last_value)))
    return rows


def stored() -> set[tuple]:
    return {(s, level, b, same(lo), same(hi), ls, same(lv)) for s, level, b, lo, hi, ls, lv in
            TraceRollup.objects.values_list("series_id", "level", "bucket", "min", "max", "last_step", "last_value")}


@pytest.mark.django_db(transaction=True)
def test_the_migration_rebuilds_every_rollup_at_the_new_widths_and_back(monkeypatch):
    rng = random.Random(2)
    steps = sorted(rng.sample(range(5_000_000), 4_000))
    values = {"loss": [rng.gauss(0, 1) for _ in steps], "kl": [rng.uniform(-1e9, 1e9) for _ in steps]}
    values["kl"][17] = math.nan
    values["kl"][18] = math.inf
    values["loss"][400] = -math.inf
    try:
        migrate("0001_initial")
        # What a sink of the old widths wrote, flushed in pieces (some buckets merged).
        monkeypatch.setattr(opdweb.traces.rollups, "ROLLUP_WIDTHS", OLD_WIDTHS)
        job = JobFactory()
        sink = TraceSink(job.pk, publish=False, flush_points=1_333)
        for i, step in enumerate(steps):
            sink.add(step, {key: column[i] for key, column in values.items()})
        sink.close()
        monkeypatch.undo()
        ids = dict(job.series.values_list("key", "pk"))
        points = {ids[key]: list(zip(steps, column, strict=True)) for key, column in values.items()}
        assert stored() == by_hand(points, OLD_WIDTHS)

        migrate("0002_rollup_widths_16_by_8")
        assert stored() == by_hand(points, NEW_WIDTHS)
        assert {level for _, level, *_ in stored()} == set(range(1, len(NEW_WIDTHS)))

        migrate("0001_initial")
        assert stored() == by_hand(points, OLD_WIDTHS)
    finally:
        migrate_to_latest()
