"""Trace storage benchmarks, ratios from one run (these machines are shared and noisy).

    make bench            # = python -m opdweb.launcher exec .venv/bin/python benchmarks/bench_traces.py

1. Ingest 1,000,000 points (10 keys x 100,000 steps) in the order a run logs them (every
   key at each step): the sink (``add`` per step, binary COPY + rollups, a transaction per
   50,000 points) against one raw psycopg COPY of the same rows in the same order into
   the same indexed table, and ORM bulk_create.
2. Downsampled read of a 1,000,000-point series into 1,000 buckets: whole range and a
   zoomed window, median of repeated reads.
3. Live latency: sink publish -> websocket client receive through daphne and the Redis
   channel layer, 1,000 messages, p50 / p95.

It runs in a throwaway database (``test_<name>``) made and dropped here.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opdweb.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")

import django  # noqa: E402

django.setup()

from django.db import connection, transaction  # noqa: E402

KEYS, STEPS = 10, 100_000


def fresh_tables():
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE traces_tracepoint, traces_tracerollup")


def make_job(team, name):
    from opdweb.jobs.models import Job

    return Job.objects.create(team=team, kind="selftest", name=name, config={})


def values(key_index: int):
    return [((step * 7919 + key_index * 104729) % 1000) / 10.0 for step in range(STEPS)]


def bench_sink(team) -> float:
    """Points arrive as a run logs them: at each step, one value per key (``add``)."""
    from opdweb.traces.sink import TraceSink

    fresh_tables()
    job = make_job(team, "sink")
    keys = [f"bench/key{k}" for k in range(KEYS)]
    columns = [values(k) for k in range(KEYS)]
    start = time.perf_counter()
    sink = TraceSink(job.pk, publish=False, flush_points=50_000)
    for step in range(STEPS):
        sink.add(step, {key: col[step] for key, col in zip(keys, columns)}, wall_time=1.7e9 + step)
    sink.flush()
    return time.perf_counter() - start


def empty_series(team, name):
    """Fresh tables and a job with its KEYS series made up front (the baselines write
    points only): returns the series ids and each key's values."""
    from opdweb.traces.models import TraceSeries

    fresh_tables()
    job = make_job(team, name)
    ids = [TraceSeries.objects.create(job=job, key=f"bench/key{k}", first_step=0, last_step=STEPS - 1).pk for k in range(KEYS)]
    return ids, [values(k) for k in range(KEYS)]


def bench_raw_copy(team) -> float:
    ids, rows_per_key = empty_series(team, "raw")
    start = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        with cursor.cursor.copy("COPY traces_tracepoint (series_id, step, wall_time, value) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "int8", "float8", "float8"])
            for step in range(STEPS):  # the order a run produces them: every key at each step
                for sid, vals in zip(ids, rows_per_key):
                    copy.write_row((sid, step, 1.7e9 + step, vals[step]))
    return time.perf_counter() - start


def bench_bulk_create(team) -> float:
    from opdweb.traces.models import TracePoint

    ids, rows_per_key = empty_series(team, "orm")
    start = time.perf_counter()
    with transaction.atomic():
        TracePoint.objects.bulk_create(
            (TracePoint(series_id=sid, step=s, wall_time=1.7e9 + s, value=vals[s])
             for s in range(STEPS) for sid, vals in zip(ids, rows_per_key)),
            batch_size=10_000,
        )
    return time.perf_counter() - start


def bench_reads(team, reps: int) -> dict:
    from opdweb.traces.models import TraceSeries
    from opdweb.traces.queries import downsample
    from opdweb.traces.sink import TraceSink

    fresh_tables()
    job = make_job(team, "read")
    n = KEYS * STEPS
    sink = TraceSink(job.pk, publish=False, flush_points=100_000)
    sink.add_many("bench/long", range(n), [((s * 7919) % 1000) / 10.0 for s in range(n)], [1.7e9] * n)
    sink.flush()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE traces_tracepoint; ANALYZE traces_tracerollup")
    series = TraceSeries.objects.get(job=job, key="bench/long")
    out = {}
    for label, (lo, hi) in {"whole range": (None, None), "zoom 37%..41%": (int(0.37 * n), int(0.41 * n)),
                            "zoom 31,000 steps": (500_000, 530_999),  # worst case: ~31,000 raw rows
                            "zoom 2,000 steps": (500_000, 501_999)}.items():
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            result = downsample(series, 1000, lo, hi)
            times.append(time.perf_counter() - t)
        out[label] = (statistics.median(times) * 1000, len(result["buckets"]), result["level"])
    return out


def bench_live(team, user, messages: int) -> tuple[float, float, float]:
    """Publish ``messages`` single-point messages through the sink's publisher; a websocket
    client on a real daphne records when each arrives."""
    from django.contrib.auth import get_user_model  # noqa: F401
    from django.contrib.sessions.backends.db import SessionStore
    from websockets.asyncio.client import connect

    from opdweb.jobs import live
    from opdweb.embedded_servers import free_port, reachable

    job = make_job(team, "live")
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.create()
    port = free_port()
    db = connection.settings_dict
    from urllib.parse import quote

    host = quote(db["HOST"], safe="") if db["HOST"].startswith("/") else db["HOST"]
    env = {**os.environ, "DATABASE_URL": f"postgres://{db['USER']}@{host}{':' + str(db['PORT']) if db['PORT'] else ''}/{db['NAME']}"}
    server = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "opdweb.asgi:application"],
                              env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not reachable("127.0.0.1", port):
            if time.time() > deadline:
                raise RuntimeError("daphne did not start")
            time.sleep(0.1)
        latencies: list[float] = []

        async def client(ready: asyncio.Event, done: asyncio.Event):
            headers = {"Cookie": f"sessionid={session.session_key}", "Origin": "http://127.0.0.1"}
            async with connect(f"ws://127.0.0.1:{port}/ws/jobs/{job.pk}/", additional_headers=headers) as ws:
                await ws.send(json.dumps({"type": "resume", "after": {}}))
                while True:
                    msg = json.loads(await ws.recv())
                    if msg["type"] == "replayed":
                        ready.set()
                    elif msg["type"] == "points":
                        now = time.time()
                        latencies.extend(now - p[2] for p in msg["points"])
                        if len(latencies) >= messages:
                            done.set()
                            return

        async def main():
            ready, done = asyncio.Event(), asyncio.Event()
            task = asyncio.create_task(client(ready, done))
            await asyncio.wait_for(ready.wait(), 30)
            loop = asyncio.get_running_loop()
            for step in range(messages):
                point = [["bench/live", step, time.time(), float(step)]]
                await loop.run_in_executor(None, live.publish, job.pk, [{"type": "trace.points", "points": point}])
                await asyncio.sleep(0.005)
            await asyncio.wait_for(task, 60)

        asyncio.run(main())
    finally:
        server.terminate()
        server.wait(timeout=20)
    ms = sorted(x * 1000 for x in latencies)
    return statistics.median(ms), ms[int(0.95 * len(ms)) - 1], ms[-1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=2, help="ingest repetitions (best is kept)")
    parser.add_argument("--read-reps", type=int, default=30)
    parser.add_argument("--messages", type=int, default=1000)
    args = parser.parse_args()

    from django.core.management import call_command
    from django.test.utils import setup_databases, teardown_databases

    connection.settings_dict["TEST"]["NAME"] = "opdweb_bench"  # never the test suite's database
    old = setup_databases(verbosity=0, interactive=False)
    try:
        from opdweb.teams.models import Membership, Role, Team
        from django.contrib.auth import get_user_model

        call_command("check", verbosity=0)
        team = Team.objects.create(name="bench", slug="bench")
        user = get_user_model().objects.create_user("bench", password="bench-password")
        Membership.objects.create(team=team, user=user, role=Role.ADMIN)
        n = KEYS * STEPS
        results = {"sink": [], "raw COPY": [], "ORM bulk_create": []}
        for _ in range(args.reps):
            results["raw COPY"].append(bench_raw_copy(team))
            results["sink"].append(bench_sink(team))
            results["ORM bulk_create"].append(bench_bulk_create(team))
        best = {k: min(v) for k, v in results.items()}
        print(f"\nIngest {n:,} points ({KEYS} keys x {STEPS:,} steps), best of {args.reps}:")
        for name, seconds in best.items():
            print(f"  {name:16s} {seconds:7.2f} s  {n / seconds:10,.0f} points/s  {best['raw COPY'] / seconds:6.0%} of raw COPY")

        print(f"\nDownsampled read of a {n:,}-point series into 1,000 buckets, median of {args.read_reps}:")
        for label, (ms, buckets, level) in bench_reads(team, args.read_reps).items():
            print(f"  {label:18s} {ms:6.1f} ms  ({buckets} buckets from rollup level {level})")

        p50, p95, worst = bench_live(team, user, args.messages)
        print(f"\nLive latency, publish -> websocket receive, {args.messages} messages: "
              f"p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {worst:.1f} ms")
    finally:
        connection.close()
        teardown_databases(old, verbosity=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
