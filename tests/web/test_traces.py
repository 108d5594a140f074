"""Trace storage: the sink's COPY path, replay safety, the rollup pyramid and
downsampled reads, checked against brute force over the raw points."""
import csv
import io
import json
import random

import pytest
from asgiref.sync import async_to_sync

from opdweb.traces.models import ROLLUP_WIDTHS, TracePoint, TraceRollup, TraceSeries
from opdweb.traces.queries import choose_level, downsample
from opdweb.traces.sink import TraceSink
from tests.web.factories import JobFactory

pytestmark = pytest.mark.django_db


def brute_force(points, start, end, width):
    """Buckets of ``width`` steps aligned to multiples of it: [start, end, min, max, last_step, last]."""
    out = {}
    for step, value in sorted(points):
        if start <= step <= end:
            b = out.setdefault(step // width,
                               [step // width * width, step // width * width + width - 1, value, value, step, value])
            b[2], b[3] = min(b[2], value), max(b[3], value)
            b[4], b[5] = step, value
    return [out[k] for k in sorted(out)]


@pytest.fixture
def job():
    return JobFactory()


def series_points(job, key):
    series = TraceSeries.objects.get(job=job, key=key)
    return list(TracePoint.objects.filter(series_id=series.pk).order_by("step").values_list("step", "value"))


def test_the_sink_writes_every_point_once(job):
    sink = TraceSink(job.pk, publish=False)
    for step in range(1000):
        sink.add(step, {"a": step * 0.5, "b": -step})
    sink.flush()
    assert series_points(job, "a") == [(s, s * 0.5) for s in range(1000)]
    assert series_points(job, "b") == [(s, float(-s)) for s in range(1000)]
    series = TraceSeries.objects.get(job=job, key="a")
    assert (series.first_step, series.last_step) == (0, 999)


def test_a_replay_writes_no_duplicates_and_leaves_rollups_unchanged(job):
    sink = TraceSink(job.pk, publish=False)
    for step in range(500):
        sink.add(step, {"a": (step * 37) % 101})
    sink.flush()
    rollups = sorted(TraceRollup.objects.values_list("level", "bucket", "min", "max", "last_step", "last_value"))
    # A second run of the same job re-emits steps 0..749: the overlap is ignored.
    replay = TraceSink(job.pk, publish=False)
    for step in range(750):
        replay.add(step, {"a": (step * 37) % 101})
    replay.flush()
    assert series_points(job, "a") == [(s, float((s * 37) % 101)) for s in range(750)]
    again = TraceSink(job.pk, publish=False)
    for step in range(750):
        again.add(step, {"a": (step * 37) % 101})
    again.flush()
    assert len(series_points(job, "a")) == 750
    after = sorted(TraceRollup.objects.values_list("level", "bucket", "min", "max", "last_step", "last_value"))
    # Buckets wholly inside the first run's steps are exactly as before.
    assert [r for r in after if (r[1] + 1) * ROLLUP_WIDTHS[r[0]] <= 500] == [
        r for r in rollups if (r[1] + 1) * ROLLUP_WIDTHS[r[0]] <= 500
    ]


def test_the_level_choice_is_the_coarsest_that_gives_at_least_half_the_buckets():
    for span in (1, 7, 100, 1000, 10**4, 30_000, 10**6, 10**8):
        for n in (1, 10, 1000):
            level = choose_level(span, n)
            assert level == 0 or span / ROLLUP_WIDTHS[level] >= n / 2
            if level + 1 < len(ROLLUP_WIDTHS):
                assert span / ROLLUP_WIDTHS[level + 1] < n / 2
    # By hand, into 1,000 buckets: 30,000 and 10,000 steps read level 1 (1,875 and 625
    # buckets of 16 steps; level 2 would give 234 and 78); 7,999 steps the raw points (level 1
    # would give 499.9, under half); 64,000 steps level 2 (500 buckets of 128 steps).
    assert [choose_level(span, 1000) for span in (30_000, 10_000, 7_999, 64_000)] == [1, 1, 0, 2]


def test_rollups_equal_brute_force_at_every_level(job):
    rng = random.Random(7)
    points = [(s, rng.uniform(-5, 5)) for s in sorted(rng.sample(range(3_000_000), 20_000))]
    sink = TraceSink(job.pk, publish=False, flush_points=3_001)
    for step, value in points:
        sink.add(step, {"x": value})
    sink.flush()
    for level in range(1, len(ROLLUP_WIDTHS)):
        width = ROLLUP_WIDTHS[level]
        stored = [[b * width, b * width + width - 1, lo, hi, ls, lv] for b, lo, hi, ls, lv in
                  TraceRollup.objects.filter(level=level).order_by("bucket").values_list("bucket", "min", "max",
                                                                                         "last_step", "last_value")]
        assert stored == brute_force(points, 0, 3_000_000, width), level


@pytest.mark.parametrize("n_buckets", [1, 7, 50, 300])
def test_downsampled_buckets_equal_brute_force_over_any_window(job, n_buckets):
    rng = random.Random(n_buckets)
    steps = sorted(rng.sample(range(20_000), 6000))
    points = [(s, rng.gauss(0, 1)) for s in steps]
    points[1234] = (points[1234][0], 1e6)  # a spike must survive downsampling
    sink = TraceSink(job.pk, publish=False, flush_points=997)
    for step, value in points:
        sink.add(step, {"loss": value})
    sink.flush()
    series = TraceSeries.objects.get(job=job, key="loss")
    windows = [(None, None), (0, 19_999), (5_000, 5_500), (123, 17_777), (points[1234][0] - 3, points[1234][0] + 3)]
    for start, end in windows:
        got = downsample(series, n_buckets, start, end)
        lo = series.first_step if start is None else max(start, series.first_step)
        hi = series.last_step if end is None else min(end, series.last_step)
        width = got.bucket_steps
        assert len(got.buckets) <= n_buckets
        # The window widens to whole buckets of the reported width.
        assert got.buckets == brute_force(points, lo // width * width, (hi // width + 1) * width - 1, width)
        if lo <= points[1234][0] <= hi:
            assert max(b[3] for b in got.buckets) == 1e6


def read_stream(response) -> str:
    async def collect():
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(collect)().decode()


def test_the_export_streams_every_point(client, job, transactional_db):
    """(Committed data: the export reads on a connection of its own, as it must under ASGI.)"""
    from tests.web.factories import MembershipFactory

    user = MembershipFactory(team=job.team).user
    client.force_login(user)
    sink = TraceSink(job.pk, publish=False)
    for step in range(12_345):
        sink.add(step, {"train/loss": 1.0 / (step + 1), "eval/acc": step % 7}, wall_time=1000.0 + step)
    sink.flush()
    response = client.get(f"/api/jobs/{job.pk}/export?format=csv")
    assert response.status_code == 200
    rows = list(csv.reader(io.StringIO(read_stream(response))))
    assert rows[0] == ["key", "step", "wall_time", "value"]
    assert len(rows) == 1 + 2 * 12_345
    loss = [r for r in rows[1:] if r[0] == "train/loss"]
    assert [int(r[1]) for r in loss] == list(range(12_345))
    assert all(float(r[3]) == 1.0 / (int(r[1]) + 1) and float(r[2]) == 1000.0 + int(r[1]) for r in loss)
    only = client.get(f"/api/jobs/{job.pk}/export?format=jsonl&key=eval/acc")
    lines = read_stream(only).splitlines()
    assert len(lines) == 12_345 and {json.loads(line)["key"] for line in lines} == {"eval/acc"}


def test_the_downsample_endpoint_is_team_scoped(client, job, outsider):
    sink = TraceSink(job.pk, publish=False)
    sink.add(0, {"a": 1.0})
    sink.flush()
    client.force_login(outsider)
    assert client.get(f"/api/jobs/{job.pk}/series/downsampled?key=a").status_code == 404
    assert client.get(f"/api/jobs/{job.pk}/export").status_code == 404
