"""Optional: the trace store side by side with MLflow, on the same PostgreSQL, in one run.

    python -m opdweb.launcher exec -- .venv/bin/python benchmarks/bench_vs_mlflow.py \\
        --mlflow-python /work/mlflow-venv/bin/python

MLflow never enters the product's environment: it runs in its own (``--mlflow-python``,
e.g. ``python3.11 -m venv /work/mlflow-venv && /work/mlflow-venv/bin/pip install
'mlflow==3.*' psycopg2-binary``) through benchmarks/mlflow_side.py and ``mlflow server``.
Without that flag, or where that Python cannot import mlflow, the benchmark prints one
line saying so and exits with status 2 (nothing measured).

Both stores get the same points, on the same PostgreSQL server, each in its own database
made and dropped here:

- ingest: ``--keys`` x ``--steps`` points, every key at each step as a training loop logs
  them, into empty tables; opdweb through the trace sink as a worker makes it, publishing
  on (bench_traces.bench_sink), until ``close()`` returns; MLflow through
  ``MlflowClient.log_batch`` straight into its SQL tracking store (its fastest path: no
  tracking server in between), 1,000 metrics per call (its maximum), until the last call
  returns.  ``--reps`` times, the order alternating;
- full-history export of that run over HTTP: opdweb ``/api/jobs/{id}/export`` (CSV,
  every key) through daphne, logged in; MLflow ``/api/2.0/mlflow/metrics/get-history``
  for each key (unpaginated: one request per key) on ``mlflow server`` (one worker);
  until every row is parsed;
- a chart read of a ``--read-points`` series (one key), whole and a 1 % zoom at random
  places: opdweb ``/api/jobs/{id}/series/downsampled`` (1,000 min/max/last buckets);
  MLflow's sampled ``/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval``
  (``max_results=1000``, what its UI asks); requests interleaved on one keep-alive
  connection per server (opened again where the server closed it while idle).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import http.client
import io
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import figures
import numpy as np
from bench_reads import loss_curve, windows  # noqa: E402  (after harness: Django is set up)
from bench_reads import url as downsampled_url  # noqa: E402
from bench_traces import WALL0, bench_sink, columns  # noqa: E402
from harness import bench_database, daphne, database_url, http_get, load, percentile, team_and_user

SIDE = Path(__file__).resolve().parent / "mlflow_side.py"
NOT_AVAILABLE = 2
MLFLOW_ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "PYTHONUNBUFFERED": "1"}
MLFLOW_ENV.pop("MLFLOW_TRACKING_URI", None)


def mlflow_version(python: str | None) -> str | None:
    """MLflow's version in that Python, or None where it cannot be imported."""
    if not python or not os.access(python, os.X_OK):
        return None
    try:
        return side(python, "version")["version"]
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return None


def side(python: str, *args: str) -> dict:
    done = subprocess.run([python, str(SIDE), *args], capture_output=True, text=True, env=MLFLOW_ENV, timeout=3600)
    if done.returncode:
        raise RuntimeError(f"mlflow_side.py {args[0]} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def mlflow_database(name: str):
    """An empty database for MLflow's tracking store; yields its SQLAlchemy URI."""
    import psycopg

    admin = database_url("postgres")
    with psycopg.connect(admin, autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        db.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(name, scheme="postgresql+psycopg2")
    finally:
        with psycopg.connect(admin, autocommit=True) as db:
            db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def mlflow_server(python: str, uri: str, workdir: Path):
    """``mlflow server`` (one worker) on the tracking store; yields host:port."""
    from opdweb.embedded_servers import free_port

    port = free_port()
    with open(workdir / "mlflow-server.log", "wb") as server_log:
        server = subprocess.Popen(
            [python, "-m", "mlflow", "server", "--backend-store-uri", uri, "--default-artifact-root",
             str(workdir / "artifacts"), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            env=MLFLOW_ENV, stdout=server_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 120
        while not healthy(f"127.0.0.1:{port}"):
            if time.time() > deadline or server.poll() is not None:
                raise RuntimeError(f"mlflow server did not start; see {workdir / 'mlflow-server.log'}")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)  # the server and the workers it started
        server.wait(timeout=30)


def healthy(host: str) -> bool:
    try:
        conn = http.client.HTTPConnection(host, timeout=2)
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False


def points_file(workdir: Path, name: str, keys: list[str], values: np.ndarray) -> str:
    path = workdir / f"{name}.npz"
    np.savez(path, keys=np.asarray(keys), steps=np.arange(values.shape[1], dtype=np.int64), values=values,
             wall0=WALL0)
    return str(path)


def ratio_line(label: str, ours: list[float], theirs: list[float], unit: str = "s") -> str:
    scale = 1000 if unit == "ms" else 1
    a, b = percentile(ours, 50) * scale, percentile(theirs, 50) * scale
    return (f"  {label:34s} opdweb {a:9.2f} {unit} (p95 {percentile(ours, 95) * scale:8.2f})   MLflow {b:9.2f} {unit} "
            f"(p95 {percentile(theirs, 95) * scale:8.2f})   MLflow / opdweb {b / a:6.1f}x")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mlflow-python", help="a Python where mlflow (3.x) and psycopg2 are installed")
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20_000, help="steps per key for ingest and export")
    parser.add_argument("--reps", type=int, default=2, help="ingest and export repetitions (median kept)")
    parser.add_argument("--read-points", type=int, default=1_000_000, help="points of the series chart reads read")
    parser.add_argument("--read-reps", type=int, default=30, help="chart-read requests per cell and store")
    parser.add_argument("--database", default="opdweb_bench")
    parser.add_argument("--record", action="store_true", help="store the README row (docs/benchmarks/figures.json)")
    args = parser.parse_args()
    version = mlflow_version(args.mlflow_python)
    if version is None:
        print(f"bench_vs_mlflow: skipped, MLflow is not importable in --mlflow-python={args.mlflow_python!r} "
              "(install it in a separate environment, see the docstring)")
        return NOT_AVAILABLE
    names = [f"bench/key{k}" for k in range(args.keys)]
    n = args.keys * args.steps
    print(f"MLflow {version} ({args.mlflow_python}) against opdweb, load average {load()}", flush=True)
    with bench_database(args.database), mlflow_database(f"{args.database}_mlflow") as uri, \
            tempfile.TemporaryDirectory(prefix="bench_vs_mlflow") as tmp:
        workdir = Path(tmp)
        team, _, cookie = team_and_user()
        run_points = points_file(workdir, "run", names, columns(args.keys, args.steps))
        side(args.mlflow_python, "ingest", "--uri", uri, "--points", points_file(workdir, "warm", names[:1],
                                                                               columns(1, 10)), "--run", "warm")
        ours, theirs, job, run_id = [], [], None, None
        for rep in range(args.reps):
            for store in ("opdweb", "mlflow") if rep % 2 == 0 else ("mlflow", "opdweb"):
                if store == "opdweb":
                    seconds, job = bench_sink(team, True, args.keys, args.steps)
                    ours.append(seconds)
                else:
                    done = side(args.mlflow_python, "ingest", "--uri", uri, "--points", run_points, "--run",
                                f"ingest {rep}", "--fresh")
                    theirs.append(done["seconds"])
                    run_id = done["run_id"]
            print(f"  ingest rep {rep + 1}: opdweb {ours[-1]:.2f} s, MLflow {theirs[-1]:.2f} s", flush=True)

        from bench_reads import ingest as ingest_read_series

        read_job, _ = ingest_read_series(team, args.read_points)
        read_run = side(args.mlflow_python, "ingest", "--uri", uri, "--points",
                        points_file(workdir, "read", ["train/loss"], loss_curve(args.read_points)[None, :]),
                        "--run", "read")["run_id"]
        print(f"  the {args.read_points:,}-point read series is in both stores", flush=True)

        with daphne() as ours_host, mlflow_server(args.mlflow_python, uri, workdir) as theirs_host:
            opdweb, mlflow = http.client.HTTPConnection(ours_host), http.client.HTTPConnection(theirs_host)
            auth = {"Cookie": cookie}

            def export_opdweb() -> int:
                text = http_get(opdweb, f"/api/jobs/{job.pk}/export?format=csv", auth).decode()
                return sum(1 for _ in csv.reader(io.StringIO(text))) - 1

            def export_mlflow() -> int:
                return sum(len(json.loads(http_get(mlflow, "/api/2.0/mlflow/metrics/get-history?"
                                              + urlencode({"run_id": run_id, "metric_key": key}), {}))["metrics"])
                           for key in names)

            exports = {"opdweb": [], "mlflow": []}
            for rep in range(args.reps + 1):
                for store, read in (("opdweb", export_opdweb), ("mlflow", export_mlflow)):
                    t = time.perf_counter()
                    rows = read()
                    if rep:  # the first is a warm-up
                        exports[store].append(time.perf_counter() - t)
                    if rows != n:
                        raise RuntimeError(f"{store} export returned {rows:,} rows, not {n:,}")

            def sampled(lo, hi) -> str:
                query = {"run_ids": read_run, "metric_key": "train/loss", "max_results": 1000}
                if lo is not None:
                    query.update(start_step=lo, end_step=hi)
                return "/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval?" + urlencode(query)

            rng = np.random.default_rng(0)
            reads = {}
            for kind in ("whole", "1%"):
                ws = windows(args.read_points, kind, args.read_reps + 3, rng)
                times = {"opdweb": [], "mlflow": []}
                for i, (lo, hi) in enumerate(ws):
                    for store, conn, path, headers in (("opdweb", opdweb, downsampled_url(read_job.pk, lo, hi), auth),
                                                       ("mlflow", mlflow, sampled(lo, hi), {})):
                        t = time.perf_counter()
                        json.loads(http_get(conn, path, headers))
                        if i >= 3:  # three warm-ups
                            times[store].append(time.perf_counter() - t)
                reads[kind] = times
            opdweb.close()
            mlflow.close()

        print(f"\nMLflow {version} against opdweb, same PostgreSQL, interleaved (median, p95; load average {load()}):")
        print(ratio_line(f"ingest {n:,} points ({args.keys}x{args.steps:,})", ours, theirs))
        print(f"  {'':34s} opdweb {n / percentile(ours, 50):,.0f} points/s, MLflow {n / percentile(theirs, 50):,.0f}"
              " points/s")
        print(ratio_line(f"export {n:,} points", exports["opdweb"], exports["mlflow"]))
        for kind, times in reads.items():
            print(ratio_line(f"chart read, {args.read_points:,} pts, {kind}", times["opdweb"], times["mlflow"], "ms"))
    if args.record:
        figures.record([readme_row(version, n, ours, theirs, exports, reads, args.read_points)])
    return 0


def readme_row(version: str, n: int, ingest: dict, ingest_mlflow: dict, exports: dict, reads: dict,
               read_points: int) -> dict:
    def ratio(ours: list[float], theirs: list[float]) -> str:
        return f"{percentile(theirs, 50) / percentile(ours, 50):,.1f}x"

    def read(kind: str) -> str:
        ours, theirs = reads[kind]["opdweb"], reads[kind]["mlflow"]
        return (f"{ratio(ours, theirs)} (p95 {percentile(ours, 95) * 1000:,.1f} ms against "
                f"{percentile(theirs, 95) * 1000:,.1f} ms)")

    return {"id": "vs-mlflow", "page": "docs/benchmarks/traces.md", "page_title": "traces",
            "what": f"against MLflow {version} on the same PostgreSQL, one run, MLflow's time over opdweb's (medians): "
                    f"ingest of {n:,} points / their export over HTTP / chart read of {read_points:,} points, "
                    "whole range / 1 % zoom",
            "latest": f"{ratio(ingest, ingest_mlflow)} / {ratio(exports['opdweb'], exports['mlflow'])} / "
                      f"{read('whole')} / {read('1%')}",
            "goal": "reads p95 ≤ 50 ms; zoom ≥ 3x"}


if __name__ == "__main__":
    raise SystemExit(main())
