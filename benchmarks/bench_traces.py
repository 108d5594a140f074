"""Ingest through the trace sink as a worker runs it, against a pre-encoded COPY floor.

    python -m opdweb.launcher exec -- .venv/bin/python benchmarks/bench_traces.py   # make bench

1,000,000 points (10 keys x 100,000 steps) in the order a run logs them (every key at
each step), into the same indexed table, fresh each time, in one run:

- floors: the rows encoded for binary COPY before the clock starts, then one COPY in one
  transaction (what PostgreSQL itself takes to ingest them), once in the order a run
  logs them and once sorted by (series, step), PostgreSQL's fastest order (the sink
  sorts each batch that way; it cannot sort a whole run it streams);
- the sink as the runner makes it: ``add`` per step, the writer thread flushing every
  50 ms, rollups, and publishing ON through the real Redis channel layer
  (``live.publish``) to a job group with one subscribed channel, so every message is
  really written to Redis (no reader: the worker's side of the cost);
- the same sink with publishing off;
- optionally (``--orm``) ORM ``bulk_create``.

The clock stops when ``close()`` returns: everything written, committed and published.
Best of ``--reps`` for each, interleaved.  Chart reads: benchmarks/bench_reads.py; live
latency: benchmarks/bench_live.py.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from django.db import connection, transaction  # noqa: E402  (harness set Django up)
from harness import bench_database, make_job, team_and_user

KEYS, STEPS = 10, 100_000
WALL0 = 1.7e9


def fresh_tables():
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE traces_tracepoint, traces_tracerollup, traces_traceseries")


def columns(keys: int = KEYS, steps: int = STEPS) -> np.ndarray:
    """Each key's values (one row per key), the same every run."""
    step = np.arange(steps)
    return np.stack([(step * 7919 + k * 104729) % 1000 / 10.0 for k in range(keys)])


def bench_sink(team, publish: bool, keys: int = KEYS, steps: int = STEPS):
    """Seconds from making the sink to ``close()`` returning, and the job written."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from opdweb.jobs import live
    from opdweb.traces.sink import TraceSink

    fresh_tables()
    job = make_job(team, "sink")
    if publish:  # a viewer's channel in the job's group: messages really go to Redis
        layer = get_channel_layer()
        channel = async_to_sync(layer.new_channel)()
        async_to_sync(layer.group_add)(live.job_group(job.pk), channel)
    names = [f"bench/key{k}" for k in range(keys)]
    cols = columns(keys, steps).tolist()  # Python floats, as a run logs them
    start = time.perf_counter()
    sink = TraceSink(job.pk, publish=(lambda messages: live.publish(job.pk, messages)) if publish else None)
    for step in range(steps):
        sink.add(step, {name: col[step] for name, col in zip(names, cols, strict=True)}, wall_time=WALL0 + step)
    sink.close()
    elapsed = time.perf_counter() - start
    if publish:
        async_to_sync(layer.group_discard)(live.job_group(job.pk), channel)
    return elapsed, job


def series_ids(team, name) -> list[int]:
    from opdweb.traces.models import TraceSeries

    fresh_tables()
    job = make_job(team, name)
    return [TraceSeries.objects.create(job=job, key=f"bench/key{k}", first_step=0, last_step=STEPS - 1).pk
            for k in range(KEYS)]


def bench_copy_floor(team, by_series: bool) -> float:
    """Rows as logged (every key at each step) or sorted by series, encoded before the clock."""
    from opdweb.traces.batches import POINT_COLUMNS
    from opdweb.traces.copy_encoding import copy_into, encode_binary_copy
    from opdweb.traces.models import POINTS_TABLE

    ids = series_ids(team, "floor")
    steps = np.repeat(np.arange(STEPS, dtype=np.int64), KEYS)
    sid = np.tile(np.asarray(ids, dtype=np.int64), STEPS)
    values = columns().T.ravel()
    if by_series:
        order = np.lexsort((steps, sid))
        steps, sid, values = steps[order], sid[order], values[order]
    data = encode_binary_copy([("int8", sid), ("int8", steps), ("float8", WALL0 + steps.astype(np.float64)),
                               ("float8", values)])
    start = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        copy_into(cursor.cursor, POINTS_TABLE, POINT_COLUMNS, data)
    return time.perf_counter() - start


def bench_bulk_create(team) -> float:
    from opdweb.traces.models import TracePoint

    ids = series_ids(team, "orm")
    cols = columns().tolist()
    start = time.perf_counter()
    with transaction.atomic():
        TracePoint.objects.bulk_create(
            (TracePoint(series_id=sid, step=s, wall_time=WALL0 + s, value=vals[s])
             for s in range(STEPS) for sid, vals in zip(ids, cols, strict=True)),
            batch_size=10_000,
        )
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3, help="repetitions, interleaved (best is kept)")
    parser.add_argument("--orm", action="store_true", help="also ORM bulk_create (slow)")
    parser.add_argument("--database", default="opdweb_bench")
    args = parser.parse_args()
    n = KEYS * STEPS
    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with bench_database(args.database):
        team, _, _ = team_and_user()
        runs = {"COPY floor, as logged": lambda: bench_copy_floor(team, False),
                "COPY floor, by series": lambda: bench_copy_floor(team, True),
                "sink, publishing on": lambda: bench_sink(team, True)[0],
                "sink, publishing off": lambda: bench_sink(team, False)[0]}
        if args.orm:
            runs["ORM bulk_create"] = lambda: bench_bulk_create(team)
        results = {name: [] for name in runs}
        cpu = {name: [] for name in runs}
        for _ in range(args.reps):
            for name, run in runs.items():
                before = time.process_time()
                results[name].append(run())
                cpu[name].append(time.process_time() - before)
        logged, by_series = min(results["COPY floor, as logged"]), min(results["COPY floor, by series"])
        print(f"\nIngest {n:,} points ({KEYS} keys x {STEPS:,} steps), best of {args.reps}; "
              "share of each floor's rate (as logged / by series):")
        for name, seconds in results.items():
            best = min(seconds)
            every = ", ".join(f"{s:.2f}" for s in seconds)
            print(f"  {name:22s} {best:6.2f} s  {n / best:10,.0f} points/s  "
                  f"{logged / best:5.0%} / {by_series / best:4.0%}"
                  f"   (runs: {every} s; this process's CPU {min(cpu[name]):.2f} s)")
        print(f"  (load average before / after: {load0} / {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
