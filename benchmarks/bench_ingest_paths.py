"""Points per second into the product by each way a trainer can send them, against the
trace sink's own rate in a worker, in one run:

    python -m opdweb.launcher exec -- .venv/bin/python benchmarks/bench_ingest_paths.py \\
        [--mlflow-python /work/mlflow-venv/bin/python]

- **sink**: ``TraceSink`` in a process of its own (as a worker holds it), publishing on;
- **native client**: ``opdweb_client.Run.log(step, {10 keys})`` per step in a process of its
  own, its background thread sending 50,000-point batches (its default) held per key to
  ``POST /api/runs/<id>/points``, then ``finish``;
- **MLflow client**: the official client (``mlflow-skinny``, the test environment's pin) in
  a process of its own, ``MlflowClient.log_batch`` of 1,000 metrics per call (its maximum;
  what its own batching sends), to ``MLFLOW_TRACKING_URI=http://<product>/mlflow`` with a
  read-write token;
- **MLflow client, to a server that answers at once**: the same script against a stdlib
  HTTP server that reads each request and answers ``{}``: what the client itself costs, the
  ceiling of any server behind it;
- **MLflow client, to MLflow's own server** (only with ``--mlflow-python``, MLflow in an
  environment of its own, as for bench_vs_mlflow.py): ``mlflow server`` (one worker) on a
  database of its own on the same PostgreSQL, the reference the issue names.

Each writes ``--keys`` × ``--steps`` points (10 × 20,000 by default) into an empty run,
through the product's web server (``opdweb.web_server``, harness.daphne) for the
product's rows; each is timed from its first point to the last acknowledged, and the stored
points are counted afterwards (every one once).  A 10-point run first warms the web
process (it imports the trace sink at its first write).  ``--reps`` rounds, interleaved,
the median kept.  The goal: the client paths at ≥ 50 % of the sink's rate.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import figures
from harness import ROOT, bench_database, child_env, daphne, database_url, load, make_job, team_and_user

SINK = """
import json, os, sys, time, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opdweb.settings"); django.setup()
from opdweb.jobs import live
from opdweb.traces.sink import TraceSink
job_id, keys, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
names = [f"k{i}" for i in range(keys)]
started = time.perf_counter()
sink = TraceSink(job_id, publish=lambda messages: live.publish(job_id, messages))
for step in range(steps):
    sink.add(step, {name: step * 0.5 + i for i, name in enumerate(names)})
sink.close()
print(json.dumps({"seconds": time.perf_counter() - started}))
"""

MLFLOW = """
import json, sys, time
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
keys, steps = int(sys.argv[1]), int(sys.argv[2])
client = MlflowClient()
run = client.create_run("0", run_name="ingest")
names = [f"k{i}" for i in range(keys)]
metrics = [Metric(name, step * 0.5 + i, 0, step) for step in range(steps) for i, name in enumerate(names)]
started = time.perf_counter()
for i in range(0, len(metrics), 1000):
    client.log_batch(run.info.run_id, metrics=metrics[i:i + 1000])
seconds = time.perf_counter() - started
client.set_terminated(run.info.run_id)
print(json.dumps({"seconds": seconds, "run": run.info.run_id}))
"""

NATIVE = """
import json, sys, time
from opdweb_client import Run
keys, steps = int(sys.argv[1]), int(sys.argv[2])
names = [f"k{i}" for i in range(keys)]
run = Run(name="ingest native", flush_interval=0.2)
started = time.perf_counter()
for step in range(steps):
    run.log(step, {name: step * 0.5 + i for i, name in enumerate(names)})
run.finish()
print(json.dumps({"seconds": time.perf_counter() - started, "run": run.id}))
"""


NULL_SERVER = """
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
RUN = {"info": {"run_id": "r", "run_uuid": "r", "experiment_id": "0", "status": "RUNNING", "run_name": "ingest",
                "lifecycle_stage": "active", "start_time": 1}, "data": {}}
class Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"run": RUN} if "runs/create" in self.path else {}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = answer
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def stored(job_id: int) -> tuple[int, int]:
    """(points stored, distinct (key, step)) of a job."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), count(DISTINCT (s.key, p.step)) FROM traces_tracepoint p "
                       "JOIN traces_traceseries s ON s.id = p.series_id WHERE s.job_id = %s", [job_id])
        return cursor.fetchone()


def run_script(script: str, args: list[str], env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=900)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def stored_by_mlflow(name: str, run_id: str) -> tuple[int, int]:
    """(points stored, distinct (key, step)) of a run in MLflow's own tracking store."""
    import psycopg

    with psycopg.connect(database_url(name)) as db:
        return db.execute("SELECT count(*), count(DISTINCT (key, step)) FROM metrics WHERE run_uuid = %s",
                          [run_id]).fetchone()


@contextlib.contextmanager
def null_server():
    """The stdlib server that answers every request at once; yields its URL."""
    server = subprocess.Popen([sys.executable, "-c", NULL_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        yield f"http://127.0.0.1:{int(server.stdout.readline())}"
    finally:
        server.terminate()
        server.wait(timeout=20)


@contextlib.contextmanager
def mlflows_own_server(python: str | None, name: str):
    """``mlflow server`` on a database of its own (``name``) on this PostgreSQL; yields (URL,
    database), or None without an MLflow environment."""
    from bench_vs_mlflow import mlflow_database, mlflow_server, mlflow_version

    if mlflow_version(python) is None:
        yield None
        return
    with mlflow_database(name) as uri, tempfile.TemporaryDirectory() as workdir, \
            mlflow_server(python, uri, Path(workdir)) as host:
        yield f"http://{host}", name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="opdweb_bench_ingest_paths")
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--mlflow-python", help="a Python with mlflow (and psycopg2) installed, for MLflow's server")
    parser.add_argument("--native-only", action="store_true", help="the sink and the native client only")
    parser.add_argument("--record", action="store_true",
                        help="store the README row (docs/benchmarks/figures.json); not with --native-only")
    args = parser.parse_args()
    n = args.keys * args.steps
    started = time.monotonic()
    shape = [str(args.keys), str(args.steps)]
    with bench_database(args.database), daphne() as host, null_server() as null_url, \
            mlflows_own_server(args.mlflow_python, f"{args.database}_mlflow") as theirs:
        team, user, _ = team_and_user()
        from opdweb.jobs.models import Job
        from opdweb.tokens.actions import do_create_token

        _, secret = do_create_token(user=user, team=team, name="bench", can_write=True)
        url = f"http://{host}"
        env = {**child_env(), "MLFLOW_TRACKING_URI": f"{url}/mlflow", "MLFLOW_TRACKING_TOKEN": secret,
               "OPDWEB_URL": url, "OPDWEB_TOKEN": secret, "MLFLOW_DISABLE_TELEMETRY": "true",
               "PYTHONPATH": os.pathsep.join([str(ROOT / "clients" / "python"), str(ROOT)])}
        paths = ["sink", "native client", "MLflow client", "MLflow client, to a server that answers at once"]
        if theirs is not None:
            paths.append("MLflow client, to MLflow's own server")
        if args.native_only:
            paths = paths[:2]
        seconds: dict[str, list[float]] = {name: [] for name in paths}
        counts: dict[str, list[tuple[int, int]]] = {name: [] for name in paths}

        def into_the_product(name: str, script: str) -> None:
            before = set(Job.objects.filter(kind="external").values_list("pk", flat=True))
            seconds[name].append(run_script(script, shape, env)["seconds"])
            counts[name].append(stored(Job.objects.filter(kind="external").exclude(pk__in=before).get().pk))

        run_script(NATIVE, ["1", "10"], env)  # warm: the web process imports the sink at its first write
        for _ in range(args.reps):
            job = make_job(team, "ingest sink")
            seconds["sink"].append(run_script(SINK, [str(job.pk), *shape], child_env())["seconds"])
            counts["sink"].append(stored(job.pk))
            into_the_product("native client", NATIVE)
            if args.native_only:
                continue
            into_the_product("MLflow client", MLFLOW)
            seconds[paths[3]].append(run_script(MLFLOW, shape, {**env, "MLFLOW_TRACKING_URI": null_url})["seconds"])
            counts[paths[3]].append((n, n))  # nothing is stored there; the row measures the client alone
            if theirs is not None:
                their_url, their_database = theirs
                answer = run_script(MLFLOW, shape, {**env, "MLFLOW_TRACKING_URI": their_url,
                                                    "MLFLOW_TRACKING_TOKEN": ""})
                seconds[paths[4]].append(answer["seconds"])
                counts[paths[4]].append(stored_by_mlflow(their_database, answer["run"]))
    rates = {name: n / statistics.median(times) for name, times in seconds.items()}
    sink_rate = rates["sink"]
    print(f"| path | points/s (median of {args.reps}) | of the sink's rate | stored (distinct) |")
    print("|---|---|---|---|")
    for name, rate in rates.items():
        answered_only = name == "MLflow client, to a server that answers at once"
        stored_text = "nothing stored" if answered_only else ", ".join(f"{c:,} ({d:,})" for c, d in counts[name])
        print(f"| {name} | {rate:,.0f} | {rate / sink_rate:.0%} | {stored_text} |")
    print(f"\n({args.keys} keys × {args.steps:,} steps = {n:,} points each; {time.monotonic() - started:.0f} s; "
          f"load average at the end: {load()})")
    ok = all(c == (n, n) for runs in counts.values() for c in runs)
    if args.record and ok and not args.native_only:
        figures.record([readme_row(rates)])
    return 0 if ok else 1


def readme_row(rates: dict[str, float]) -> dict:
    native, mlflow, sink = rates["native client"], rates["MLflow client"], rates["sink"]
    nothing = rates["MLflow client, to a server that answers at once"]
    theirs = rates.get("MLflow client, to MLflow's own server")
    own = f"; MLflow's own server: {theirs:,.0f}" if theirs is not None else ""
    return {"id": "points-per-second", "page": "docs/tracking.md", "page_title": "tracking",
            "what": "points/s into a run: native client / official MLflow client / the sink itself",
            "latest": f"{native:,.0f} / {mlflow:,.0f} / {sink:,.0f} ({100 * native / sink:.0f} % / "
                      f"{100 * mlflow / sink:.0f} %; the MLflow client alone, to a server doing nothing: "
                      f"{nothing:,.0f}{own})",
            "goal": "≥ 50 % of the sink"}


if __name__ == "__main__":
    raise SystemExit(main())
