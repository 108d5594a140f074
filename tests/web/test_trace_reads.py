"""Downsampled reads computed by PostgreSQL, checked against a brute-force numpy
computation over the raw points: random series whose lengths and step ranges cross the
rollup widths, read at every level and at window edges."""
import numpy as np
import pytest

from opdweb.traces.models import ROLLUP_WIDTHS, TraceSeries
from opdweb.traces.queries import MAX_BUCKETS, downsample
from opdweb.traces.sink import TraceSink
from tests.web.factories import JobFactory

pytestmark = pytest.mark.django_db


def wall_of(steps: np.ndarray) -> np.ndarray:
    """The wall times the tests log: distinct per step, so a wrong lookup shows."""
    return 1.7e9 + steps * 0.25


def brute_force(steps: np.ndarray, values: np.ndarray, lo: int, hi: int, width: int, wall: bool) -> list[list]:
    """Buckets of ``width`` steps aligned to multiples of it over ``[lo, hi]``:
    ``[start, end, min, max, last_step, last]`` and, with ``wall``, the wall time of
    last_step, from the raw points (steps sorted)."""
    keep = (steps >= lo) & (steps <= hi)
    s, v = steps[keep], values[keep]
    if not len(s):
        return []
    bucket = s // width
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    ends = np.r_[starts[1:], len(s)] - 1
    return [
        [int(b) * width, int(b) * width + width - 1, float(mn), float(mx), int(ls), float(lv)]
        + ([float(wall_of(ls))] if wall else [])
        for b, mn, mx, ls, lv in zip(bucket[starts], np.minimum.reduceat(v, starts), np.maximum.reduceat(v, starts),
                                     s[ends], v[ends], strict=True)
    ]


def ingest(job, key, steps, values, rng) -> TraceSeries:
    """Through the sink in uneven batches, as a run would, then a replay of a stretch of
    it (which must change nothing)."""
    sink = TraceSink(job.pk, flush_points=int(rng.integers(500, 40_000)))
    for i in range(0, len(steps), 1000):
        sink.add_many(key, steps[i : i + 1000].tolist(), values[i : i + 1000].tolist(),
                      wall_of(steps[i : i + 1000]).tolist())
    sink.close()
    a, b = sorted(rng.integers(0, len(steps), 2).tolist())
    replay = TraceSink(job.pk)
    replay.add_many(key, steps[a : b + 1].tolist(), values[a : b + 1].tolist(), wall_of(steps[a : b + 1]).tolist())
    replay.close()
    return TraceSeries.objects.get(job=job, key=key)


def windows_for(first: int, last: int, rng) -> list[tuple]:
    """Whole range, open ends, windows on and beside bucket edges of every width, a single
    step, a window past the end and an empty one."""
    out = [(None, None), (first, last), (None, (first + last) // 2), ((first + last) // 2, None), (first, first),
           (last, last), (last + 1, last + 100), (-50, first), (last - 1, last + 10**7)]
    for width in ROLLUP_WIDTHS[1:]:
        if width > last:
            break
        edge = int(rng.integers(first // width, last // width + 1)) * width
        out += [(edge, edge + width - 1), (edge - 1, edge + width), (edge + 1, edge + 2 * width - 2)]
    for _ in range(3):
        a, b = sorted(rng.integers(first, last + 1, 2).tolist())
        out.append((a, b))
    return out


# (number of points, largest step): dense and sparse series whose spans cross each width.
SERIES = [(1, 0), (31, 30), (33, 32), (257, 300), (2_049, 2_048), (5_000, 20_000), (16_500, 16_500),
          (60_000, 140_000), (40_000, 2_500_000), (200_000, 200_000)]


@pytest.mark.parametrize("n_points, max_step", SERIES)
def test_downsampled_reads_equal_brute_force_at_every_level_and_edge(n_points, max_step):
    rng = np.random.default_rng(n_points * 7 + max_step)
    job = JobFactory()
    steps = np.sort(rng.choice(max_step + 1, size=n_points, replace=False)).astype(np.int64)
    values = rng.normal(0, 1, n_points).round(6)
    values[rng.integers(0, n_points)] = 1e9  # a spike survives at every level
    series = ingest(job, "loss", steps, values, rng)
    first, last = int(steps[0]), int(steps[-1])
    assert (series.first_step, series.last_step) == (first, last)

    levels_seen = set()
    for start, end in windows_for(first, last, rng):
        lo = first if start is None else max(start, first)
        hi = last if end is None else min(end, last)
        span = hi - lo + 1
        # Bucket counts that land on every level this window allows, plus a few fixed ones.
        counts = {1, 7, 1000, MAX_BUCKETS} | {max(1, span // w) for w in ROLLUP_WIDTHS if w <= span}
        for asked in sorted(counts):
            wall = asked % 2 == 1  # about half the reads with wall times
            got = downsample(series, asked, start, end, wall=wall)
            n_buckets = min(asked, MAX_BUCKETS)  # larger asks are capped
            if hi < lo:
                assert got.buckets == []
                continue
            levels_seen.add(got.level)
            width, stored = got.bucket_steps, ROLLUP_WIDTHS[got.level]
            assert width % stored == 0
            # The stored level is the coarsest giving at least half the asked buckets ...
            assert got.level == 0 or span / stored >= n_buckets / 2
            if got.level + 1 < len(ROLLUP_WIDTHS):
                assert span / ROLLUP_WIDTHS[got.level + 1] < n_buckets / 2
            # ... and the output width the smallest multiple of it giving at most n buckets.
            assert hi // width - lo // width + 1 <= n_buckets
            if width > stored:
                assert hi // (width - stored) - lo // (width - stored) + 1 > n_buckets
            expected = brute_force(steps, values, lo // width * width, (hi // width + 1) * width - 1, width, wall)
            assert got.buckets == expected, (start, end, asked, got.level)
    # Every level a read of this series can choose: up to widths of twice its span (a
    # whole-range read of 1 bucket takes the coarsest giving at least half of one).
    reachable = {level for level, w in enumerate(ROLLUP_WIDTHS) if w <= max(1, 2 * (last - first + 1))}
    assert levels_seen == reachable


def test_a_read_touches_at_most_4_rollup_rows_or_16_points_per_bucket_asked():
    """The level choice bounds the rows PostgreSQL aggregates for any window: the next level
    would give fewer than half the buckets asked, and levels are 8x apart (32x from the raw
    points), so (plus the two output buckets the window may widen into)."""
    rng = np.random.default_rng(3)
    job = JobFactory()
    n = 300_000
    steps = np.arange(n, dtype=np.int64)
    series = ingest(job, "x", steps, rng.normal(size=n), rng)
    from django.db import connection

    for start, end, n_buckets in [(None, None, 1000), (0, 31_999, 1000), (100_000, 130_999, 1000), (5, 260_000, 100),
                                  (17, 18, 1000), (0, 299_999, MAX_BUCKETS), (0, 15_999, 1000), (1000, 16_998, 1000)]:
        got = downsample(series, n_buckets, start, end)
        stored = ROLLUP_WIDTHS[got.level]
        lo, hi = got.buckets[0][0], got.buckets[-1][1]
        with connection.cursor() as cursor:
            if got.level == 0:
                cursor.execute("SELECT count(*) FROM traces_tracepoint WHERE series_id = %s AND step BETWEEN %s AND %s",
                               [series.pk, lo, hi])
            else:
                cursor.execute("SELECT count(*) FROM traces_tracerollup WHERE series_id = %s AND level = %s "
                               "AND bucket BETWEEN %s AND %s", [series.pk, got.level, lo // stored, hi // stored])
            rows = cursor.fetchone()[0]
        per_bucket = 16 if got.level == 0 else 4
        assert rows <= per_bucket * n_buckets + 2 * got.bucket_steps // stored, (start, end, got.level, rows)


def test_a_downsampled_read_is_one_query_and_the_endpoint_adds_only_access(client):
    """The read itself is one SQL statement at every level; the endpoint around it costs
    the session, the user, the job with the user's role in its team (one query) and the
    series row: five in all."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.web.factories import MembershipFactory

    job = JobFactory()
    sink = TraceSink(job.pk)
    sink.add_many("loss", list(range(5000)), [float(s % 17) for s in range(5000)], [0.0] * 5000)
    sink.close()
    series = TraceSeries.objects.get(job=job, key="loss")
    for n_buckets in (1, 10, 1000, 5000):
        with CaptureQueriesContext(connection) as captured:
            got = downsample(series, n_buckets)
        assert len(captured) == 1, (n_buckets, got.level)
    client.force_login(MembershipFactory(team=job.team).user)
    client.get(f"/api/jobs/{job.pk}/series/downsampled?key=loss")  # session warm
    with CaptureQueriesContext(connection) as captured:
        response = client.get(f"/api/jobs/{job.pk}/series/downsampled?key=loss&buckets=100&start=10&end=4000")
    assert response.status_code == 200
    # 3,991 steps into 100 buckets: level 1 (16 steps; level 2's 128 would give 31
    # buckets), three of its buckets per output one (two would give 125 > 100).
    assert response.json()["bucket_steps"] == 48 and response.json()["buckets"][0][:2] == [0, 47]
    assert len(captured) == 4, [q["sql"][:80] for q in captured]


def test_chart_reads_are_sent_compressed_to_clients_that_accept_gzip(client):
    import gzip
    import json

    from tests.web.factories import MembershipFactory

    job = JobFactory()
    sink = TraceSink(job.pk)
    sink.add_many("loss", list(range(20_000)), [float(s % 101) / 7 for s in range(20_000)],
                  [1.7e9 + s for s in range(20_000)])
    sink.close()
    client.force_login(MembershipFactory(team=job.team).user)
    url = f"/api/jobs/{job.pk}/series/downsampled?key=loss&buckets=1000"
    plain = client.get(url)
    packed = client.get(url, HTTP_ACCEPT_ENCODING="gzip, deflate, br")
    assert "Content-Encoding" not in plain and packed["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in packed["Vary"]
    assert json.loads(gzip.decompress(packed.content)) == plain.json()
    assert len(packed.content) < len(plain.content) / 2
    assert int(packed["Content-Length"]) == len(packed.content)
    # A small answer is sent as it is.
    tiny = client.get(f"/api/jobs/{job.pk}/series", HTTP_ACCEPT_ENCODING="gzip")
    assert "Content-Encoding" not in tiny and tiny.json()[0]["key"] == "loss"


def test_a_series_that_goes_nan_reads_as_strict_json_with_its_non_finite_values_named(client):
    """A loss that diverges logs inf and NaN.  The answer stays strict JSON (no bare NaN
    token, which browsers refuse): a non-finite min, max or last comes as a string, and
    the finite values around it are exact.  PostgreSQL orders NaN above every number."""
    import json

    from tests.web.factories import MembershipFactory

    job = JobFactory()
    values = [1.0, 0.5, float("inf"), 0.25, float("nan"), 2.0, float("-inf"), 0.125]
    sink = TraceSink(job.pk)
    sink.add_many("loss", range(8), values, [1.7e9 + s for s in range(8)])
    sink.close()
    client.force_login(MembershipFactory(team=job.team).user)

    def refuse(name):
        raise AssertionError(f"bare {name} in the answer")

    raw = client.get(f"/api/jobs/{job.pk}/series/downsampled?key=loss&buckets=4&wall=true").content
    buckets = json.loads(raw, parse_constant=refuse)["buckets"]
    # Buckets of 2 steps: [1, 0.5], [inf, 0.25], [NaN, 2], [-inf, 0.125].
    assert [b[:6] for b in buckets] == [
        [0, 1, 0.5, 1.0, 1, 0.5],
        [2, 3, 0.25, "Infinity", 3, 0.25],
        [4, 5, 2.0, "NaN", 5, 2.0],
        [6, 7, "-Infinity", 0.125, 7, 0.125],
    ]
    assert [b[6] for b in buckets] == [1.7e9 + 1, 1.7e9 + 3, 1.7e9 + 5, 1.7e9 + 7]
    single = client.get(f"/api/jobs/{job.pk}/series/downsampled?key=loss&buckets=8&start=4&end=4").json()["buckets"]
    assert single == [[4, 4, "NaN", "NaN", 4, "NaN"]]


@pytest.mark.parametrize("flush_points", [1000, 25], ids=["one batch", "rollups merged across batches"])
def test_every_level_orders_nan_as_postgresql_does(flush_points):
    """A NaN is a bucket's max (PostgreSQL orders it above every number) and never its min,
    at the raw level and in the rollups the sink computes, batch by batch, alike."""
    job = JobFactory()
    values = [float(s % 7) + 1 for s in range(64)]
    values[10], values[40], values[62] = float("inf"), float("nan"), -1.0
    sink = TraceSink(job.pk, publish=False, flush_points=flush_points)
    for step, value in enumerate(values):
        sink.add(step, {"loss": value})
    sink.close()
    series = TraceSeries.objects.get(job=job, key="loss")
    rollup = downsample(series, 2)
    raw = downsample(series, 64, 0, 63)
    assert (rollup.level, rollup.bucket_steps, raw.level) == (1, 32, 0)
    # Steps 0-31: values 1..7 and inf; steps 32-63: 1..7, NaN at 40, -1 at 62; step 63: 63 % 7 + 1.
    assert rollup.buckets == [[0, 31, 1.0, "Infinity", 31, 4.0], [32, 63, -1.0, "NaN", 63, 1.0]]
    # The raw points, bucketed here, give the same.
    for half, bucket in zip((raw.buckets[:32], raw.buckets[32:]), rollup.buckets, strict=True):
        points = [float(b[5]) for b in half]
        assert bucket[2] == min(v for v in points if v == v)
        assert bucket[3] == ("NaN" if any(v != v for v in points) else "Infinity")


def test_a_batched_read_answers_each_key_as_its_own_read_does_in_one_request(client):
    """The job page asks for its charts in one request: each series as the single-key
    endpoint gives it, in the order asked, each key once; one access check and one series
    lookup for all of them, then one statement per series."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.web.factories import MembershipFactory

    job = JobFactory()
    sink = TraceSink(job.pk)
    for k, n in enumerate((1, 3000, 70_000)):  # a single number, the raw level, a rollup level
        sink.add_many(f"m/{k}", range(n), [float((s * (k + 3)) % 11) for s in range(n)], [1.7e9 + s for s in range(n)])
    sink.close()
    client.force_login(MembershipFactory(team=job.team).user)
    keys = ["m/2", "m/0", "m/1", "m/2"]
    url = f"/api/jobs/{job.pk}/series/batch?buckets=500&" + "&".join(f"key={k}" for k in keys)
    client.get(url)  # session warm
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    queries = [q["sql"][:80] for q in captured]  # now: the next request empties Django's query log
    assert response.status_code == 200
    got = response.json()["series"]
    assert [s["key"] for s in got] == ["m/2", "m/0", "m/1"]
    for read in got:
        alone = client.get(f"/api/jobs/{job.pk}/series/downsampled?key={read['key']}&buckets=500").json()
        assert read == alone
    # 70,000 steps into 500 buckets: level 2 (128 steps; 70,000 / 128 >= 250 buckets, level 3's
    # 1,024 would give 68).
    assert [s["level"] for s in got] == [2, 0, 0] and len(got[1]["buckets"]) == 1
    assert len(queries) == 3 + 3, queries  # session, user, series + their job's team + role; 3 reads
    with_wall = client.get(f"/api/jobs/{job.pk}/series/batch?key=m/1&buckets=10&wall=true").json()["series"][0]
    assert [b[6] for b in with_wall["buckets"]] == [1.7e9 + b[4] for b in with_wall["buckets"]]


def test_a_batched_read_refuses_what_it_cannot_answer_and_reveals_no_other_teams_keys(client):
    from tests.web.factories import MembershipFactory

    job, other = JobFactory(), JobFactory()
    for j in (job, other):
        sink = TraceSink(j.pk)
        sink.add_many("loss", range(10), [1.0] * 10, [0.0] * 10)
        sink.close()
    client.force_login(MembershipFactory(team=job.team).user)
    base = f"/api/jobs/{job.pk}/series/batch"
    missing = client.get(f"{base}?key=loss&key=nope")
    assert missing.status_code == 404 and "'nope'" in missing.json()["detail"]
    assert client.get(base).status_code == 400  # no key
    too_many = client.get(f"{base}?" + "&".join(f"key=k{i}" for i in range(33)))
    assert too_many.status_code == 400 and too_many.json()["errors"][0]["field"] == "key"
    assert client.get(f"{base}?key=loss&buckets=0").status_code == 400
    assert client.get(f"/api/jobs/{other.pk}/series/batch?key=loss").status_code == 404
    client.logout()
    assert client.get(f"{base}?key=loss").status_code == 401


def test_steps_up_to_2_to_the_53_read_exactly_and_larger_ones_are_refused():
    """A bucket's last value is found by comparing steps as float8, exact up to 2**53 - 1
    (also the largest step a browser holds exactly); the sink refuses larger steps."""
    from opdweb.traces.models import MAX_STEP

    job = JobFactory()
    sink = TraceSink(job.pk, publish=False)
    sink.add_many("far", [MAX_STEP - 2, MAX_STEP - 1, MAX_STEP], [3.0, 1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="2\\*\\*53"):
        sink.add(MAX_STEP + 1, {"far": 9.0})
    with pytest.raises(ValueError, match="2\\*\\*53"):
        sink.add_many("far", [5, MAX_STEP + 1], [9.0, 9.0], [4.0, 4.0])
    sink.close()
    series = TraceSeries.objects.get(job=job, key="far")
    for wall in (False, True):
        got = downsample(series, 1, wall=wall)
        assert got.buckets == [[MAX_STEP - 3, MAX_STEP, 1.0, 3.0, MAX_STEP, 2.0] + ([3.0] if wall else [])]
        assert downsample(series, 3, wall=wall).buckets[1][4:] == [MAX_STEP - 1, 1.0] + ([2.0] if wall else [])
