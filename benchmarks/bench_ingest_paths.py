"""Points per second into the product by each way a trainer can send them, against the
trace sink's own rate in a worker, in one run:

    python -m opdweb.launcher exec -- .venv/bin/python benchmarks/bench_ingest_paths.py

- **sink**: ``TraceSink`` in a process of its own (as a worker holds it), publishing on;
- **MLflow client**: the official client (``mlflow-skinny``, the test environment's pin) in
  a process of its own, ``MlflowClient.log_batch`` of 1,000 metrics per call (its maximum;
  what its own batching sends), to ``MLFLOW_TRACKING_URI=http://<product>/mlflow`` with a
  read-write token;
- **native client**: ``opdweb_client.Run.log(step, {10 keys})`` per step in a process of its
  own, its background thread batching 1,000 points a request, then ``finish``.

All three write ``--keys`` × ``--steps`` points (10 × 20,000 by default) into empty jobs of
one team on a throwaway database, through the product's web server (``opdweb.web_server``)
for the two clients; each is timed from its first point to the last acknowledged, and the
stored points are counted afterwards (every one once).  ``--reps`` rounds, interleaved, the
median kept.  The goal: each client path at ≥ 50 % of the sink's rate.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from harness import ROOT, bench_database, child_env, load, team_and_user

from opdweb.embedded_servers import free_port, reachable

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="opdweb_bench_ingest_paths")
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    n = args.keys * args.steps
    started = time.monotonic()
    with bench_database(args.database):
        team, user, _ = team_and_user()
        from harness import make_job

        from opdweb.jobs.models import Job
        from opdweb.tokens.actions import do_create_token

        _, secret = do_create_token(user=user, team=team, name="bench", can_write=True)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "opdweb.web_server", "-b", "127.0.0.1", "-p", str(port),
                                   "opdweb.asgi:application"], env=child_env(), cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds: dict[str, list[float]] = {"sink": [], "MLflow client": [], "native client": []}
        counts: dict[str, list[tuple[int, int]]] = {name: [] for name in seconds}
        try:
            while not reachable("127.0.0.1", port):
                time.sleep(0.1)
            url = f"http://127.0.0.1:{port}"
            clients_env = {**child_env(), "MLFLOW_TRACKING_URI": f"{url}/mlflow", "MLFLOW_TRACKING_TOKEN": secret,
                           "OPDWEB_URL": url, "OPDWEB_TOKEN": secret,
                           "PYTHONPATH": os.pathsep.join([str(ROOT / "clients" / "python"), str(ROOT)])}
            for _ in range(args.reps):
                job = make_job(team, "ingest sink")
                seconds["sink"].append(run_script(SINK, [str(job.pk), str(args.keys), str(args.steps)],
                                                  child_env())["seconds"])
                counts["sink"].append(stored(job.pk))
                for name, script in (("MLflow client", MLFLOW), ("native client", NATIVE)):
                    before = set(Job.objects.filter(kind="external").values_list("pk", flat=True))
                    seconds[name].append(run_script(script, [str(args.keys), str(args.steps)], clients_env)["seconds"])
                    made = Job.objects.filter(kind="external").exclude(pk__in=before).get()
                    counts[name].append(stored(made.pk))
        finally:
            server.terminate()
            server.wait(timeout=20)
    sink_rate = n / statistics.median(seconds["sink"])
    print(f"| path | points/s (median of {args.reps}) | of the sink's rate | stored (distinct) |")
    print("|---|---|---|---|")
    for name, times in seconds.items():
        rate = n / statistics.median(times)
        print(f"| {name} | {rate:,.0f} | {rate / sink_rate:.0%} | "
              + ", ".join(f"{c:,} ({d:,})" for c, d in counts[name]) + " |")
    print(f"\n({args.keys} keys × {args.steps:,} steps = {n:,} points each; {time.monotonic() - started:.0f} s; "
          f"load average at the end: {load()})")
    return 0 if all(c == (n, n) for runs in counts.values() for c in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
