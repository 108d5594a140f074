"""A large export as users get it: ``GET /api/jobs/{id}/export`` (CSV) of 1M points through
a real daphne, logged in, read by an HTTP client in this process.

    python -m opdweb.launcher exec -- .venv/bin/python benchmarks/bench_export.py

Three readers of the same job, each against the product's web server
(:mod:`opdweb.web_server`, daphne with flow control) and against daphne alone, one after
the other in one run: as fast as it can go (``--reps`` times), the same with the machine
loaded (two busy processes on the two cores), and a reader that stalls for ``--stall``
seconds after its first megabyte.  For each: the wall time, whether every row arrived with
its value (closed form: step s has value s / 4), and the server's resident memory before
and at peak (sampled every 50 ms): daphne alone applies no backpressure, so what a stalled
reader has not taken in waits in its memory.
"""
from __future__ import annotations

import argparse
import http.client
import statistics
import subprocess
import sys
import threading
import time

import figures
from bench_reliability import rss_mb
from harness import ROOT, bench_database, child_env, load, team_and_user

from opdweb.embedded_servers import free_port, reachable

# The product's web server, and daphne as it is (no flow control), side by side.
SERVERS = {"opdweb.web_server": "opdweb.web_server", "daphne 4.2 alone": "daphne"}


def fill(job, points: int) -> None:
    from django.db import connection

    from opdweb.traces.models import TraceSeries

    series = TraceSeries.objects.create(job=job, key="loss", first_step=0, last_step=points - 1)
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO traces_tracepoint (series_id, step, wall_time, value) "
                       "SELECT %s, g, 1e9 + g, g / 4.0 FROM generate_series(0, %s) g", [series.pk, points - 1])
        cursor.execute("ANALYZE traces_tracepoint")


def read(host: str, path: str, cookie: str, server_pid: int, stall_s: float = 0.0) -> dict:
    peak, before, sampling = [0.0], rss_mb(server_pid), [True]

    def sample():
        while sampling[0]:
            peak[0] = max(peak[0], rss_mb(server_pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.perf_counter()
    conn = http.client.HTTPConnection(host, timeout=300)
    conn.request("GET", path, headers={"Cookie": cookie})
    response = conn.getresponse()
    rows = wrong = got = 0
    stalled, rest = False, b""
    while block := response.read(1 << 16):
        got += len(block)
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        for line in lines:
            if line.startswith(b"key,"):
                continue
            _, step, _, value = line.split(b",")
            rows += 1
            wrong += float(value) != int(step) / 4
        if stall_s and not stalled and got >= 1 << 20:
            time.sleep(stall_s)
            stalled = True
    seconds = time.perf_counter() - started
    sampling[0] = False
    sampler.join()
    return {"status": response.status, "rows": rows, "wrong": wrong, "mb": got / 1e6, "seconds": seconds,
            "rss_before_mb": before, "rss_peak_mb": peak[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="opdweb_bench_export")
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--stall", type=float, default=20.0)
    parser.add_argument("--reps", type=int, default=3, help="fast reads per server (median kept)")
    parser.add_argument("--record", action="store_true", help="store the README row (docs/benchmarks/figures.json)")
    args = parser.parse_args()
    started = time.monotonic()
    with bench_database(args.database):
        team, user, cookie = team_and_user()
        from harness import make_job

        job = make_job(team, "export", state="succeeded")
        fill(job, args.points)
        servers, results = {}, {}
        try:
            for name, module in SERVERS.items():
                port = free_port()
                servers[name] = (subprocess.Popen(
                    [sys.executable, "-m", module, "-b", "127.0.0.1", "-p", str(port), "opdweb.asgi:application"],
                    env=child_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port)
            for _, port in servers.values():
                while not reachable("127.0.0.1", port):
                    time.sleep(0.1)
            path = f"/api/jobs/{job.pk}/export?format=csv"

            def each(label: str, **kw) -> None:  # the two servers one after the other, for every row
                for name, (server, port) in servers.items():
                    results.setdefault((label, name), []).append(read(f"127.0.0.1:{port}", path, cookie, server.pid,
                                                                      **kw))

            each("warm")  # imports, the pool, the page cache
            for _ in range(args.reps):
                each("as fast as it can")
            burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
            try:
                each("as fast as it can, 2 busy processes beside")
            finally:
                for burner in burners:
                    burner.kill()
            each(f"stalls {args.stall:g} s after 1 MB", stall_s=args.stall)
        finally:
            for server, _ in servers.values():
                server.terminate()
                server.wait(timeout=20)
    print("| reader | server | rows (wrong) | body | wall time (median) | RSS before → peak |")
    print("|---|---|---|---|---|---|")
    for (label, name), runs in results.items():
        if label == "warm":
            continue
        r = runs[0]
        seconds = statistics.median(x["seconds"] for x in runs)
        print(f"| {label} | {name} | {r['rows']:,} ({r['wrong']}) | {r['mb']:.1f} MB | {seconds:.2f} s "
              f"| {r['rss_before_mb']:.0f} → {max(x['rss_peak_mb'] for x in runs):.0f} MB |")
    print(f"\n({time.monotonic() - started:.0f} s; load average at the end: {load()})")
    ok = all(r["status"] == 200 and r["rows"] == args.points and not r["wrong"] for runs in results.values()
             for r in runs)
    if args.record and ok:
        figures.record([readme_row(results, args.points, args.stall)])
    return 0 if ok else 1


def readme_row(results: dict, points: int, stall: float) -> dict:
    fast = statistics.median(r["seconds"] for r in results["as fast as it can", "opdweb.web_server"])

    def grew(name: str) -> str:
        r = results[f"stalls {stall:g} s after 1 MB", name][0]
        return f"+{r['rss_peak_mb'] - r['rss_before_mb']:.0f} MB"

    return {"id": "csv-export", "page": "docs/traces.md", "page_title": "traces",
            "what": f"{points / 1e6:g}M-point CSV export over HTTP: fast reader / reader stalled {stall:g} s",
            "latest": f"{fast:.2f} s / server {grew('opdweb.web_server')} (daphne alone {grew('daphne 4.2 alone')})",
            "goal": ""}


if __name__ == "__main__":
    raise SystemExit(main())
