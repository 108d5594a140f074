"""Interactive work on a busy fleet, and how fast Cancel stops each kind.

The fleet ``make run`` starts on a machine without a GPU: one solo worker on the ``gpu``
queue and one on ``cpu``, as separate processes, with daphne in front; jobs are submitted,
read and cancelled through the REST API with a bearer token, as a script would.

* **Measure to verdict**: a measurement (``mismatch``) submitted on an idle fleet, and the
  same submitted while a calibration runs (its parent waiting, one of its training runs
  under way on the gpu worker).  The training run makes way (it stops at its next step with
  its checkpoint, and resumes behind the measurement), so the measurement does not wait for
  it.  Ratio busy / idle (goal 1.5x).
* **Cancel to cancelled**, per kind: each kind submitted alone, cancelled once it has
  reported progress, timed until the API says ``cancelled``.

    python benchmarks/bench_scheduling.py --model tests/science/fixtures/toy-test/student
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import figures
from harness import ROOT, bench_database, child_env, daphne, load, team_and_user

TOY = ROOT / "tests/science/fixtures/toy-test"


def api(conn: http.client.HTTPConnection, token: str, method: str, path: str, body: dict | None = None) -> dict:
    conn.request(method, f"/api/{path}", body=json.dumps(body) if body is not None else None,
                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    if response.status >= 300:
        raise RuntimeError(f"{method} /api/{path}: {response.status} {data[:300]!r}")
    return json.loads(data)


def wait(conn, token, job_id: int, done, timeout: float, what: str) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api(conn, token, "GET", f"jobs/{job_id}")
        if done(job):
            return job
        time.sleep(0.05)
    raise RuntimeError(f"job {job_id}: {what} not seen within {timeout:.0f} s ({job['state']}: {job['message']})")


def ended(job: dict) -> bool:
    return job["state"] in ("succeeded", "failed", "cancelled")


def measure_to_verdict(conn, token, config: dict) -> tuple[float, bool]:
    """Seconds from submit to verdict, and whether a running training run made way for it."""
    from opdweb.jobs.models import JobLogEntry

    start = time.monotonic()
    job = api(conn, token, "POST", "jobs", {"kind": "mismatch", "config": config})
    job = wait(conn, token, job["id"], ended, 1800, "the measurement's end")
    if job["state"] != "succeeded":
        raise RuntimeError(f"measurement {job['id']} {job['state']}: {job['error']}")
    seconds = time.monotonic() - start
    return seconds, JobLogEntry.objects.filter(message__contains=f"made way for interactive job #{job['id']}").exists()


def cancel_latency(conn, token, kind: str, config: dict) -> tuple[float, str]:
    job = api(conn, token, "POST", "jobs", {"kind": kind, "config": config})
    wait(conn, token, job["id"], lambda j: ended(j) or (j["state"] in ("running", "waiting") and j["progress"] > 0),
         1800, "progress")
    start = time.monotonic()
    api(conn, token, "POST", f"jobs/{job['id']}/cancel")
    job = wait(conn, token, job["id"], ended, 600, "the cancel")
    return time.monotonic() - start, job["state"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(TOY / "student"))
    ap.add_argument("--teacher", default=None, help="default: the model's sibling folder 'teacher'")
    ap.add_argument("--prompts", type=int, default=64, help="the measurement's prompts")
    ap.add_argument("--steps", type=int, default=150, help="each calibration run's training steps")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--kinds", default="selftest,mismatch,drift,train,noise-solve,sensitivity,calibration")
    ap.add_argument("--database", default="opdweb_bench_scheduling")
    ap.add_argument("--record", action="store_true", help="store the README row (docs/benchmarks/figures.json)")
    args = ap.parse_args()
    # Stopped from outside (a smoke test's ceiling), it still stops its workers (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    model = str(Path(args.model).resolve())
    teacher = str(Path(args.teacher).resolve()) if args.teacher else str(Path(model).parent / "teacher")
    roots = os.pathsep.join({str(Path(model).parent.parent), str(Path(teacher).parent.parent)})
    os.environ["OPDWEB_MODEL_ROOTS"] = roots

    from django.conf import settings

    settings.OPDWEB_MODEL_ROOTS = [Path(r) for r in roots.split(os.pathsep)]
    from opdweb.tokens.actions import do_create_token
    from workers.science.entrypoints import get_kind

    measure = {**get_kind("mismatch").example(model), "prompts": args.prompts, "device": "cpu"}
    calibration = {**get_kind("calibration").example(model), "teacher": teacher, "steps": args.steps,
                   "levels": [10.0, 100.0], "seeds": 2, "max_seeds": 2, "max_extensions": 0, "max_bisections": 0,
                   "device": "cpu"}
    small = {
        "selftest": {"steps": 100_000, "sleep_s": 0.01},
        "mismatch": {**measure, "prompts": 4096},
        "drift": {**get_kind("drift").example(model), "prompts": 4096},
        "train": {**get_kind("train").example(model), "teacher": teacher, "steps": 500, "batch_size": 8,
                  "device": "cpu"},
        "noise-solve": {**get_kind("noise-solve").example(model), "prompts": 4096},
        "sensitivity": {**get_kind("sensitivity").example(model), "prompts": 512},
        "calibration": calibration,
    }
    with bench_database(args.database):
        team, user, _ = team_and_user()
        token = do_create_token(user=user, team=team, name="bench", can_write=True)[1]
        env = {**child_env(), "OPDWEB_MODEL_ROOTS": roots, "OPDWEB_WORKER_DEVICE": "cpu"}
        celery = [sys.executable, "-m", "celery", "-A", "opdweb.celery_app", "worker", "--pool", "solo",
                  "--loglevel", "INFO", "--without-mingle", "--without-gossip"]
        workers = [subprocess.Popen(celery + ["-Q", queue, "-n", f"bench-{queue}@%h"], env=env, cwd=ROOT,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for queue in ("gpu", "cpu")]
        try:
            with daphne() as host:
                conn = http.client.HTTPConnection(host, timeout=60)
                measure_to_verdict(conn, token, measure)  # warm: the BF16 reference cached, as a team's repeats
                idle = [measure_to_verdict(conn, token, measure)[0] for _ in range(args.reps)]
                busy, children_running, made_way = [], [], []
                parent = api(conn, token, "POST", "jobs", {"kind": "calibration", "config": calibration})
                for _ in range(args.reps):
                    # A training run of the calibration's under way on the gpu worker (the
                    # noise solves before them are short and cannot stop half way).
                    # (Measured anyway, and said so, if none is seen within a minute or the
                    # calibration ends: at a smoke size its runs last moments.)
                    deadline = time.monotonic() + 60
                    while True:
                        running = [c for c in api(conn, token, "GET", f"jobs/{parent['id']}/children")
                                   if c["state"] == "running" and c["kind"] == "train" and c["progress"] > 0.05]
                        if running or time.monotonic() > deadline or ended(api(conn, token, "GET",
                                                                               f"jobs/{parent['id']}")):
                            break
                        time.sleep(0.1)
                    children_running.append(len(running))
                    seconds, preempted = measure_to_verdict(conn, token, measure)
                    busy.append(seconds)
                    made_way.append(preempted)
                calibration_state = api(conn, token, "GET", f"jobs/{parent['id']}")["state"]
                if not ended(api(conn, token, "GET", f"jobs/{parent['id']}")):
                    api(conn, token, "POST", f"jobs/{parent['id']}/cancel")
                    wait(conn, token, parent["id"], ended, 600, "the calibration's cancel")
                cancels = {kind: cancel_latency(conn, token, kind, small[kind]) for kind in args.kinds.split(",")}
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(timeout=60)

    ratio = statistics.median(busy) / statistics.median(idle)
    print(f"load average {load()}; {args.reps} measurement(s) of {args.prompts} prompts each way, median\n")
    print("| measurement, submit to verdict | median s | all s |")
    print("|---|---|---|")
    print(f"| fleet idle | {statistics.median(idle):.1f} | {', '.join(f'{s:.1f}' for s in idle)} |")
    print(f"| a calibration running ({calibration_state} when the last ended; training runs under way on the gpu "
          f"worker: {', '.join(map(str, children_running))}; a training run made way: "
          f"{', '.join('yes' if m else 'no' for m in made_way)}) | {statistics.median(busy):.1f} | "
          f"{', '.join(f'{s:.1f}' for s in busy)} |")
    print(f"| busy / idle | {ratio:.2f}x | goal 1.5x |\n")
    print("| kind | Cancel to cancelled, s | ended |")
    print("|---|---|---|")
    for kind, (seconds, state) in cancels.items():
        print(f"| {kind} | {seconds:.2f} | {state} |")
    if args.record:
        cancelled = [seconds for seconds, state in cancels.values() if state == "cancelled"]
        figures.record([{
            "id": "interactive-on-busy-fleet", "page": "docs/jobs.md#benchmark-interactive-work-on-a-busy-fleet",
            "page_title": "jobs",
            "what": f"measurement ({Path(model).parent.name} toy, {args.prompts:,} prompts), submit to verdict over "
                    f"the REST API: fleet idle / a calibration's training run under way on the one gpu worker (it "
                    f"makes way), medians of {args.reps}; Cancel to cancelled, {len(cancels)} kinds",
            "latest": f"{statistics.median(idle):.1f} s / {statistics.median(busy):.1f} s ({ratio:.2f}x; a run made "
                      f"way {sum(made_way)} of {len(made_way)} times); "
                      f"{len(cancelled)} of {len(cancels)} kinds cancelled in {min(cancelled, default=0):.2f}-"
                      f"{max(cancelled, default=0):.2f} s",
            "goal": "≤ 1.5x; seconds"}])
    return 0


if __name__ == "__main__":
    sys.exit(main())
