"""Chart reads as a browser makes them: over HTTP through daphne, logged in.

    python -m opdweb.launcher exec -- .venv/bin/python benchmarks/bench_reads.py

For series of 10k, 100k, 1M and 5M points (``--sizes``), written through the sink, each
in its own job (all in the same tables): ``GET /api/jobs/{id}/series/downsampled`` with
1,000 buckets (what the job page asks) over the whole range, and over 1 % and 3 % zooms
at random places, on one keep-alive connection.  Per cell: p50 / p95 / max of the full
request (send, server, gzip as a browser accepts it, receive, gunzip, JSON decode), the same read in process (``downsample``:
PostgreSQL and Python only), the floor (the one statement that read runs, timed by
PostgreSQL itself: ``EXPLAIN ANALYZE``'s planning and execution time, no network, no
Python) and the HTTP p50 as a multiple of it, the rollup level used and the buckets
returned; and the number of SQL queries one request makes (Django's query log, in process).
"""  # noqa: E501
from __future__ import annotations

import argparse
import gzip
import http.client
import json
import time

import figures
import numpy as np
from harness import bench_database, daphne, load, make_job, percentile, team_and_user

CHUNK = 200_000


def loss_curve(n: int) -> np.ndarray:
    """The values of the ``n``-point series read here: a noisy random walk, the same every run."""
    rng = np.random.default_rng(n)
    return np.concatenate([np.cumsum(rng.normal(0, 0.01, m)) + rng.normal(0, 0.1, m)
                           for m in (min(CHUNK, n - start) for start in range(0, n, CHUNK))])


def ingest(team, n: int):
    from opdweb.traces.models import TraceSeries
    from opdweb.traces.sink import TraceSink

    job = make_job(team, f"read {n:,}", state="succeeded")
    values = loss_curve(n)
    sink = TraceSink(job.pk)
    for start in range(0, n, CHUNK):
        stop = min(start + CHUNK, n)
        sink.add_many("train/loss", range(start, stop), values[start:stop].tolist(), [1.7e9 + start] * (stop - start))
    sink.close()  # also ANALYZEs the tables once they changed enough
    return job, TraceSeries.objects.get(job=job, key="train/loss")


def windows(n: int, kind: str, reps: int, rng) -> list[tuple[int | None, int | None]]:
    if kind == "whole":
        return [(None, None)] * reps
    width = max(1, int(n * {"1%": 0.01, "3%": 0.03}[kind]))
    starts = rng.integers(0, n - width + 1, reps)
    return [(int(s), int(s) + width - 1) for s in starts]


def url(job_id: int, lo, hi) -> str:
    query = "key=train/loss&buckets=1000" + ("" if lo is None else f"&start={lo}&end={hi}")
    return f"/api/jobs/{job_id}/series/downsampled?{query}"


def queries_per_request(user, job_id: int) -> int:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    client.get(url(job_id, None, None))  # warm
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url(job_id, 0, 999)).status_code == 200
    return len(captured)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000,1000000,5000000")
    parser.add_argument("--reps", type=int, default=60, help="requests per cell")
    parser.add_argument("--database", default="opdweb_bench")
    parser.add_argument("--record", action="store_true",
                        help="store the README row (docs/benchmarks/figures.json): 1M points, else the largest")
    args = parser.parse_args()
    from opdweb.traces.queries import downsample, read_plan

    sizes = [int(s) for s in args.sizes.split(",")]
    with bench_database(args.database):
        team, user, cookie = team_and_user()
        jobs = {}
        for n in sizes:
            t = time.perf_counter()
            jobs[n] = ingest(team, n)
            print(f"ingested {n:,} points through the sink in {time.perf_counter() - t:.1f} s", flush=True)
        print(f"\nSQL queries per downsampled-read request (in process): "
              f"{queries_per_request(user, jobs[sizes[0]][0].pk)}")
        rng = np.random.default_rng(0)
        cells = {}
        with daphne() as host:
            conn = http.client.HTTPConnection(host)
            headers = {"Cookie": cookie, "Accept-Encoding": "gzip, deflate"}  # as a browser asks
            print(f"\nDownsampled reads, 1,000 buckets, over HTTP through daphne (one keep-alive connection), "
                  f"{args.reps} "
                  "requests per cell; in process = downsample() alone:")
            print(f"  {'points':>9s}  {'window':6s}  {'HTTP p50':>9s} {'p95':>7s} {'max':>7s}"
                  f"   {'in process p50':>14s} {'p95':>6s}   {'floor p50':>9s}  {'HTTP/floor':>10s}"
                  "   level  buckets")
            for n in sizes:
                job, series = jobs[n]
                for kind in ("whole", "1%", "3%"):
                    ws = windows(n, kind, args.reps, rng)
                    for lo, hi in ws[:3]:  # warm the connection and the cache
                        conn.request("GET", url(job.pk, lo, hi), headers=headers)
                        conn.getresponse().read()
                    http_ms, local_ms, floor_ms, levels, counts = [], [], [], set(), []
                    for lo, hi in ws:
                        t = time.perf_counter()
                        conn.request("GET", url(job.pk, lo, hi), headers=headers)
                        response = conn.getresponse()
                        raw = response.read()
                        if response.getheader("Content-Encoding") == "gzip":
                            raw = gzip.decompress(raw)
                        body = json.loads(raw)
                        http_ms.append((time.perf_counter() - t) * 1000)
                        assert response.status == 200, body
                        levels.add(body["level"])
                        counts.append(len(body["buckets"]))
                        t = time.perf_counter()
                        downsample(series, 1000, lo, hi)
                        local_ms.append((time.perf_counter() - t) * 1000)
                        floor_ms.append(in_postgres_ms(read_plan(series, 1000, lo, hi)))
                    cells[n, kind] = http_ms, local_ms, floor_ms
                    floor = percentile(floor_ms, 50)
                    print(f"  {n:9,d}  {kind:6s}  {percentile(http_ms, 50):7.1f} ms {percentile(http_ms, 95):7.1f} "
                          f"{max(http_ms):7.1f}   {percentile(local_ms, 50):11.1f} ms {percentile(local_ms, 95):6.1f}"
                          f"   {floor:6.2f} ms  {percentile(http_ms, 50) / floor:9.1f}x"
                          f"   {','.join(map(str, sorted(levels))):5s}  {min(counts)}-{max(counts)}", flush=True)
            conn.close()
            print(f"  (load average at the end: {load()})")
    if args.record:
        figures.record([readme_row(cells, 1_000_000 if 1_000_000 in sizes else max(sizes), args.reps)])
    return 0


def in_postgres_ms(plan) -> float:
    """What PostgreSQL itself spends on a read's statement (planning and execution, as
    ``EXPLAIN ANALYZE`` times them without per-node timing): the floor under any read."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + plan.sql, plan.params)
        report = cursor.fetchone()[0]
    report = report[0] if isinstance(report, list) else json.loads(report)[0]
    return report["Planning Time"] + report["Execution Time"]


def readme_row(cells: dict, n: int, reps: int) -> dict:
    def cell(kind: str) -> str:
        http_ms, local_ms, floor_ms = cells[n, kind]
        return (f"{percentile(http_ms, 50):.1f} / {percentile(http_ms, 95):.1f} ms "
                f"(in process {percentile(local_ms, 50):.1f} ms, SQL alone {percentile(floor_ms, 50):.1f} ms)")

    return {"id": "zoom-read", "page": "docs/benchmarks/traces.md", "page_title": "traces",
            "what": f"chart read of a {n:,}-point series over HTTP through daphne, 1,000 buckets, {reps} requests "
                    "each, p50 / p95: whole range / 1 % zoom / 3 % zoom",
            "latest": " · ".join(cell(kind) for kind in ("whole", "1%", "3%")),
            "goal": "p95 ≤ 25 ms quiet, ≤ 50 ms loaded"}


if __name__ == "__main__":
    raise SystemExit(main())
