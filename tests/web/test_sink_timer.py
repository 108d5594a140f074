"""The trace sink's writer thread: a point is written and published without another
``add``, concurrent adds and flushes lose and duplicate nothing, the live messages carry
exactly the points written, and the consumer forwards each step once.  Timing goals are
measured by benchmarks/bench_live.py; here a point only has to arrive well before
anything else could have flushed it."""
import asyncio
import json
import threading
import time

import numpy as np
import pytest
from django.db import connection, transaction
from websockets.asyncio.client import connect

from opdweb.jobs import live
from opdweb.jobs.actions import do_submit_job
from opdweb.jobs.models import Job, JobState
from opdweb.traces.live_format import unpack_live_message
from opdweb.traces.live_packing import LIVE_MESSAGE_POINTS
from opdweb.traces.models import TracePoint, TraceSeries
from opdweb.traces.sink import TraceSink
from tests.web.conftest import wait_for
from tests.web.factories import JobFactory
from workers.science.selftest import SELFTEST_KEYS, selftest_value


def stored(job, key) -> list[tuple[int, float]]:
    series = TraceSeries.objects.filter(job=job, key=key).first()
    if series is None:
        return []
    return list(TracePoint.objects.filter(series_id=series.pk).order_by("step").values_list("step", "value"))


def published_points(messages) -> dict[str, list[tuple[int, float, float]]]:
    out: dict[str, list] = {}
    for message in messages:
        assert message["type"] == "trace.points"
        for key, _, steps, walls, values in unpack_live_message(message):
            out.setdefault(key, []).extend(zip(steps.tolist(), walls.tolist(), values.tolist(), strict=True))
    return out


def other_sessions() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_single_point_is_written_and_published_without_another_add():
    job = JobFactory()
    messages = []
    sink = TraceSink(job.pk, publish=messages.extend)
    assert sink.threaded
    sink.add(0, {"loss": 2.5}, wall_time=1000.0)
    # Nothing else is added or flushed: the writer thread alone must deliver it.
    wait_for(lambda: stored(job, "loss") == [(0, 2.5)] and messages, 10, "the timer to flush one point")
    assert published_points(messages) == {"loss": [(0, 1000.0, 2.5)]}
    sink.add(1, {"loss": 3.5}, wall_time=1001.0)
    wait_for(lambda: len(stored(job, "loss")) == 2, 10, "the timer to flush a second point")
    sink.close()
    assert not sink._thread.is_alive()
    assert published_points(messages) == {"loss": [(0, 1000.0, 2.5), (1, 1001.0, 3.5)]}
    # The writer's connection went with it.
    wait_for(lambda: other_sessions() == 0, 10, "the writer thread's connection to close")
    with pytest.raises(RuntimeError):
        sink.add(2, {"loss": 1.0})


@pytest.mark.django_db(transaction=True)
def test_concurrent_adds_and_flushes_write_and_publish_every_point_once():
    job = JobFactory()
    messages = []
    sink = TraceSink(job.pk, publish=messages.extend, flush_points=700, flush_seconds=0.01)
    n_threads, n_steps = 4, 3000

    def produce(t):
        for step in range(n_steps):
            sink.add(step, {f"t{t}/a": step * 0.25 + t, f"t{t}/b": -step}, wall_time=float(step))
            if step % 997 == 0:
                sink.flush()

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(n_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sink.flush()  # whatever was left is written before flush returns
    assert len(sink) == 0
    sink.close()
    got = published_points(messages)
    for t in range(n_threads):
        expected_a = [(s, s * 0.25 + t) for s in range(n_steps)]
        assert stored(job, f"t{t}/a") == expected_a
        assert stored(job, f"t{t}/b") == [(s, float(-s)) for s in range(n_steps)]
        assert [(s, v) for s, _, v in got[f"t{t}/a"]] == expected_a
        assert [(s, v) for s, _, v in got[f"t{t}/b"]] == [(s, float(-s)) for s in range(n_steps)]
    assert sum(len(np.frombuffer(m["steps"], "<i8")) for m in messages) == n_threads * n_steps * 2


@pytest.mark.django_db
def test_inside_a_transaction_the_sink_flushes_in_the_caller_and_publishes_the_batch():
    """A sink made inside an open transaction keeps its points in it (no writer thread);
    one flush publishes each key's points in step order, a replayed step once with its
    first value (as stored), and splits messages past LIVE_MESSAGE_POINTS."""
    job = JobFactory()
    messages = []
    with transaction.atomic():
        sink = TraceSink(job.pk, publish=messages.extend, flush_points=10**6, flush_seconds=3600)
        assert not sink.threaded
        n = LIVE_MESSAGE_POINTS * 2 + 123
        rng = np.random.default_rng(5)
        values = rng.normal(size=n)
        sink.add_many("big", list(range(n)), values.tolist(), [5.0] * n)
        for step in (3, 1, 2, 1):  # out of order, step 1 twice
            sink.add(step, {"small": float(step * 10 + len(messages))}, wall_time=7.0)
        assert messages == []
        assert sink.flush() == n + 4
        sink.close()
    assert len(messages) == 3 and all(len(np.frombuffer(m["steps"], "<i8")) <= LIVE_MESSAGE_POINTS for m in messages)
    got = published_points(messages)
    assert got["big"] == [(s, 5.0, float(v)) for s, v in zip(range(n), values, strict=True)]
    assert got["small"] == [(1, 7.0, 10.0), (2, 7.0, 20.0), (3, 7.0, 30.0)]
    assert stored(job, "small") == [(1, 10.0), (2, 20.0), (3, 30.0)]
    assert stored(job, "big") == [(s, float(v)) for s, v in zip(range(n), values, strict=True)]


@pytest.mark.django_db(transaction=True)
def test_the_trace_tables_are_analysed_after_a_large_ingest():
    """Whether or not autovacuum runs (it is off on some hosts), closing a sink that wrote
    past the threshold leaves the planner's row counts current."""
    def planner_rows(table):
        with connection.cursor() as cursor:
            cursor.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [table])
            return cursor.fetchone()[0]

    job = JobFactory()
    sink = TraceSink(job.pk)
    n = 60_000
    sink.add_many("x", range(n), [1.0] * n, [0.0] * n)
    sink.close()
    assert planner_rows("traces_tracepoint") == TracePoint.objects.count() == n
    assert planner_rows("traces_tracerollup") > 0
    # A few more points are far below the threshold: no new ANALYZE.
    more = TraceSink(job.pk)
    more.add_many("x", range(n, n + 100), [1.0] * 100, [0.0] * 100)
    more.close()
    assert planner_rows("traces_tracepoint") == n


@pytest.mark.django_db(transaction=True)
def test_a_producer_held_back_waits_until_its_batch_is_being_copied(monkeypatch):
    """A producer faster than the database waits at 8 x ``flush_points`` pending; once the
    writer takes that batch, the producer stays held while the writer prepares it
    (arrays, series, encoding: here made slow) and goes on as its COPY starts.  Nothing is
    lost or duplicated."""
    from opdweb.traces.pending import PendingPoints

    real_arrays = PendingPoints.arrays
    preparing: list[tuple[int, int, int]] = []  # (points in the batch, added before, added after)
    sink: TraceSink | None = None

    def slow_arrays(self):
        before = sink._added
        time.sleep(0.1)
        preparing.append((self.count, before, sink._added))
        return real_arrays(self)

    monkeypatch.setattr(PendingPoints, "arrays", slow_arrays)
    job = JobFactory()
    sink = TraceSink(job.pk, flush_points=25)
    n = 1_000
    for step in range(n):
        sink.add(step, {"x": float(step)})
    sink.close()
    held = [batch for batch in preparing if batch[0] >= 8 * 25]
    assert held, f"the producer was never held back: batches {[b[0] for b in preparing]}"
    assert all(before == after for _, before, after in held), held
    assert stored(job, "x") == [(s, float(s)) for s in range(n)]


@pytest.mark.django_db(transaction=True)
def test_a_slow_analyze_holds_back_neither_writes_nor_the_live_channel(monkeypatch):
    """The statistics check runs in a thread of its own: while it is stuck (an ANALYZE of
    a large table takes seconds), later points are still written and published; closing
    waits for it."""
    from opdweb.traces import sink as sink_module

    started, release = threading.Event(), threading.Event()

    def stuck_analyze(written):
        started.set()
        release.wait(30)
        return []

    monkeypatch.setattr(sink_module, "analyze_if_needed", stuck_analyze)
    monkeypatch.setattr(sink_module, "ANALYZE_CHECK_ROWS", 10)
    messages: list[dict] = []
    job = JobFactory()
    sink = TraceSink(job.pk, publish=messages.extend)
    for step in range(20):
        sink.add(step, {"x": float(step)})
    sink.flush()
    wait_for(started.is_set, 10, "the statistics check to start")
    sink.add(20, {"x": 20.0})
    sink.flush()
    assert stored(job, "x")[-1] == (20, 20.0)
    wait_for(lambda: 20 in {step for step, _, _ in published_points(messages).get("x", [])}, 10,
             "step 20 published while the statistics check is stuck")
    closing = threading.Thread(target=sink.close)
    closing.start()
    closing.join(0.5)
    assert closing.is_alive(), "close() returned before the statistics check ended"
    release.set()
    closing.join(10)
    assert not closing.is_alive()
    assert [step for step, _, _ in published_points(messages)["x"]] == list(range(21))


@pytest.mark.django_db(transaction=True)
def test_a_failed_write_is_raised_in_the_caller():
    """A batch the database refuses (here: points of a job that does not exist) surfaces
    on the next flush, not silently in the writer thread."""
    sink = TraceSink(10**9)
    sink.add(0, {"x": 1.0})
    with pytest.raises(Exception) as caught:
        sink.flush()
    assert "traceseries" in str(caught.value).lower() or "foreign key" in str(caught.value).lower()
    sink.close()
    assert not sink._thread.is_alive()


def session_cookie(client, user) -> str:
    from django.conf import settings

    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def test_the_consumer_forwards_each_live_step_once(member, asgi_server, client):
    """Live messages from sinks in this process, through the Redis channel layer and
    daphne: a client that has steps up to 5 receives 6.. once, also when a replayed
    attempt re-sends steps it has."""
    user, team = member
    job = JobFactory(team=team)
    cookie = session_cookie(client, user)

    def produce():
        first = TraceSink(job.pk, publish=lambda m: live.publish(job.pk, m))
        for step in range(10):
            first.add(step, {"a": step / 4})
        first.close()
        replay = TraceSink(job.pk, publish=lambda m: live.publish(job.pk, m))
        for step in range(13):
            replay.add(step, {"a": step / 4})
        replay.close()

    async def main():
        got = []
        async with connect(f"ws://{asgi_server}/ws/jobs/{job.pk}/",
                           additional_headers={"Cookie": cookie, "Origin": "http://127.0.0.1"}) as ws:
            await ws.send(json.dumps({"type": "resume", "after": {"a": 5}}))
            while json.loads(await asyncio.wait_for(ws.recv(), timeout=30))["type"] != "replayed":
                pass
            producing = asyncio.get_running_loop().run_in_executor(None, produce)
            while not got or got[-1][1] < 12:
                msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=30))
                if msg["type"] == "points":
                    got.extend(msg["points"])
            await producing
            # Nothing more comes: a second look finds no duplicate in flight.
            try:
                msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=1))
                assert msg["type"] != "points", msg
            except asyncio.TimeoutError:
                pass
        return got

    got = asyncio.run(main())
    assert [(p[0], p[1], p[3]) for p in got] == [("a", s, s / 4) for s in range(6, 13)]


def test_one_logged_point_reaches_a_websocket_client_while_the_job_still_runs(member, start_worker, asgi_server,
                                                                              client):
    """A selftest job on a real worker logs its only step, then sleeps: the point must
    reach the browser's websocket from the timer flush, before the job ends (at its end
    the sink would be flushed anyway)."""
    user, team = member
    cookie = session_cookie(client, user)
    job = do_submit_job(team=team, user=user, kind_name="selftest", config={"steps": 1, "sleep_s": 6})

    def start():
        try:
            start_worker()
        finally:
            connection.close()

    def state_now():
        try:
            return Job.objects.get(pk=job.pk).state
        finally:
            connection.close()

    async def main():
        states = []
        async with connect(f"ws://{asgi_server}/ws/jobs/{job.pk}/",
                           additional_headers={"Cookie": cookie, "Origin": "http://127.0.0.1"}) as ws:
            await ws.send(json.dumps({"type": "resume", "after": {}}))
            while True:  # the job is still queued: nothing to replay
                msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=30))
                assert msg["type"] != "points"
                if msg["type"] == "replayed":
                    break
            loop = asyncio.get_running_loop()
            starting = loop.run_in_executor(None, start)
            points = []
            while len(points) < len(SELFTEST_KEYS):
                msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=90))
                if msg["type"] == "state":
                    states.append(msg["job"]["state"])
                    assert msg["job"]["state"] in ("queued", "running"), "the job ended before its point arrived"
                elif msg["type"] == "points":
                    points.extend(msg["points"])
            received = time.time()
            state = await loop.run_in_executor(None, state_now)
            await starting
        return points, received, state

    points, received, state = asyncio.run(main())
    assert state == JobState.RUNNING
    assert sorted((p[0], p[1], p[3]) for p in points) == sorted((k, 0, selftest_value(k, 0)) for k in SELFTEST_KEYS)
    assert received - points[0][2] < 5  # long before the job's end would have flushed it
