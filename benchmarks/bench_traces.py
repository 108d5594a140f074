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
  (``live.publish``) to a job group that a viewer in a process of its own has joined, as
  daphne joins it for a websocket client, so every message really goes through Redis to a
  subscriber (the viewer's reading is not on this process's clock: the worker's side of
  the cost);
- the same sink with publishing off;
- optionally (``--orm``) ORM ``bulk_create``.

The clock stops when ``close()`` returns: everything written, committed and published.
Best of ``--reps`` for each, interleaved.  ``--keys`` and ``--steps`` shrink the run (the
smoke test in ``make test`` runs 2 x 200).  Chart reads: benchmarks/bench_reads.py; live
latency: benchmarks/bench_live.py.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time

import figures
import numpy as np
from django.db import connection, transaction  # noqa: E402  (harness set Django up)
from harness import ROOT, bench_database, child_env, make_job, team_and_user

KEYS, STEPS = 10, 100_000
WALL0 = 1.7e9


def fresh_tables():
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE traces_tracepoint, traces_tracerollup, traces_traceseries")


def columns(keys: int = KEYS, steps: int = STEPS) -> np.ndarray:
    """Each key's values (one row per key), the same every run."""
    step = np.arange(steps)
    return np.stack([(step * 7919 + k * 104729) % 1000 / 10.0 for k in range(keys)])


def follow(job_id: int) -> None:
    """The viewer's process: join the job's group on a channel of its own, as daphne does for
    a websocket client, say so on stdout, then take every message until killed (SIGTERM's
    default: Redis drops the subscription with the connection).  (The Redis pub/sub layer
    keeps channels per event loop, so channel and group must be made on the loop that reads
    them.)"""
    from channels.layers import get_channel_layer

    from opdweb.jobs import live

    async def run() -> None:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(live.job_group(job_id), channel)
        print("ready", flush=True)
        while True:
            await layer.receive(channel)

    asyncio.run(run())


@contextlib.contextmanager
def viewer(job_id: int):
    """A process following the job's group (``follow``) while the block runs."""
    with subprocess.Popen([sys.executable, __file__, "--follow", str(job_id)], env=child_env(), cwd=ROOT,
                          stdout=subprocess.PIPE, text=True) as proc:  # leaving it waits for the process
        try:
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the viewer did not join job {job_id}'s group (exit {proc.wait()})")
            yield
        finally:
            proc.terminate()


def bench_sink(team, publish: bool, keys: int = KEYS, steps: int = STEPS):
    """Seconds from making the sink to ``close()`` returning, and the job written."""
    from opdweb.jobs import live
    from opdweb.traces.sink import TraceSink

    fresh_tables()
    job = make_job(team, "sink")
    names = [f"bench/key{k}" for k in range(keys)]
    cols = columns(keys, steps).tolist()  # Python floats, as a run logs them
    with viewer(job.pk) if publish else contextlib.nullcontext():
        start = time.perf_counter()
        sink = TraceSink(job.pk, publish=(lambda messages: live.publish(job.pk, messages)) if publish else None)
        for step in range(steps):
            sink.add(step, {name: col[step] for name, col in zip(names, cols, strict=True)}, wall_time=WALL0 + step)
        sink.close()
        elapsed = time.perf_counter() - start
    return elapsed, job


def series_ids(team, name, keys: int, steps: int) -> list[int]:
    from opdweb.traces.models import TraceSeries

    fresh_tables()
    job = make_job(team, name)
    return [TraceSeries.objects.create(job=job, key=f"bench/key{k}", first_step=0, last_step=steps - 1).pk
            for k in range(keys)]


def bench_copy_floor(team, by_series: bool, keys: int = KEYS, steps: int = STEPS) -> float:
    """Rows as logged (every key at each step) or sorted by series, encoded before the clock."""
    from opdweb.traces.batches import POINT_COLUMNS
    from opdweb.traces.copy_encoding import copy_into, encode_binary_copy
    from opdweb.traces.models import POINTS_TABLE

    ids = series_ids(team, "floor", keys, steps)
    step = np.repeat(np.arange(steps, dtype=np.int64), keys)
    sid = np.tile(np.asarray(ids, dtype=np.int64), steps)
    values = columns(keys, steps).T.ravel()
    if by_series:
        order = np.lexsort((step, sid))
        step, sid, values = step[order], sid[order], values[order]
    data = encode_binary_copy([("int8", sid), ("int8", step), ("float8", WALL0 + step.astype(np.float64)),
                               ("float8", values)])
    start = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        copy_into(cursor.cursor, POINTS_TABLE, POINT_COLUMNS, data)
    return time.perf_counter() - start


def bench_bulk_create(team, keys: int = KEYS, steps: int = STEPS) -> float:
    from opdweb.traces.models import TracePoint

    ids = series_ids(team, "orm", keys, steps)
    cols = columns(keys, steps).tolist()
    start = time.perf_counter()
    with transaction.atomic():
        TracePoint.objects.bulk_create(
            (TracePoint(series_id=sid, step=s, wall_time=WALL0 + s, value=vals[s])
             for s in range(steps) for sid, vals in zip(ids, cols, strict=True)),
            batch_size=10_000,
        )
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3, help="repetitions, interleaved (best is kept)")
    parser.add_argument("--orm", action="store_true", help="also ORM bulk_create (slow)")
    parser.add_argument("--database", default="opdweb_bench")
    parser.add_argument("--keys", type=int, default=KEYS)
    parser.add_argument("--steps", type=int, default=STEPS, help="steps per key")
    parser.add_argument("--follow", type=int, metavar="JOB", help=argparse.SUPPRESS)  # the viewer's process
    parser.add_argument("--record", action="store_true", help="store the README row (docs/benchmarks/figures.json)")
    args = parser.parse_args()
    if args.follow is not None:
        follow(args.follow)
        return 0
    keys, steps = args.keys, args.steps
    n = keys * steps
    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with bench_database(args.database):
        team, _, _ = team_and_user()
        runs = {"COPY floor, as logged": lambda: bench_copy_floor(team, False, keys, steps),
                "COPY floor, by series": lambda: bench_copy_floor(team, True, keys, steps),
                "sink, publishing on": lambda: bench_sink(team, True, keys, steps)[0],
                "sink, publishing off": lambda: bench_sink(team, False, keys, steps)[0]}
        if args.orm:
            runs["ORM bulk_create"] = lambda: bench_bulk_create(team, keys, steps)
        results = {name: [] for name in runs}
        cpu = {name: [] for name in runs}
        for _ in range(args.reps):
            for name, run in runs.items():
                before = time.process_time()
                results[name].append(run())
                cpu[name].append(time.process_time() - before)
        logged, by_series = min(results["COPY floor, as logged"]), min(results["COPY floor, by series"])
        print(f"\nIngest {n:,} points ({keys} keys x {steps:,} steps), best of {args.reps}; "
              "share of each floor's rate (as logged / by series):")
        for name, seconds in results.items():
            best = min(seconds)
            every = ", ".join(f"{s:.2f}" for s in seconds)
            print(f"  {name:22s} {best:6.2f} s  {n / best:10,.0f} points/s  "
                  f"{logged / best:5.0%} / {by_series / best:4.0%}"
                  f"   (runs: {every} s; this process's CPU {min(cpu[name]):.2f} s)")
        print(f"  (load average before / after: {load0} / {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
    if args.record:
        best = min(results["sink, publishing on"])
        figures.record([{
            "id": "ingest", "page": "docs/benchmarks/traces.md", "page_title": "traces",
            "what": f"trace ingest, {n:,} points through the real sink, publishing on, best of {args.reps}: "
                    "share of a pre-encoded binary COPY's rate (rows as logged / sorted by series)",
            "latest": f"{logged / best:.0%} / {by_series / best:.0%} ({n / best:,.0f} points/s)",
            "goal": "≥ 70 % (as logged)"}])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
