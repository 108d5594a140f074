"""The reliability table of the README, measured on the real stack and printed as Markdown.

    python -m opdweb.launcher exec -- .venv/bin/python benchmarks/bench_reliability.py

(or with ``DATABASE_URL`` set to a PostgreSQL server).  It makes and drops a database of
its own (``--database``) and runs Redis servers of its own (embedded, append-only), so it
never touches the queues of a running instance; every process it starts is stopped.

1. **worker kill -9 mid-job**: a Celery worker (separate process) runs a resumable
   ``selftest`` job; it is killed with SIGKILL halfway, a fresh worker starts, the reaper
   (``do_reap_stale_jobs``, ``JOB_STALE_SECONDS`` short) requeues the job; the outcome, the
   time from the kill to it, and the stored points against ``selftest_value``.
2. **Redis kill -9 + restart**: jobs submitted with no worker running, the broker's Redis
   killed with SIGKILL and started again on its data and port by its supervisor (as the
   launcher holds it), then a worker and the resender (``do_resend_lost_messages``): jobs
   lost and the time to all done.  In a child process, since Django reads ``REDIS_URL`` once.
3. **50 websocket clients + 5 logging jobs** on a real daphne: each client resumes and
   acknowledges every points message, as the page does; points missing / duplicated
   against the formula, p95 live latency, daphne's resident memory.
6. **soak**: an MLflow run logging at 1,000 points/s (the official client, 100 metrics
   every 0.1 s) through a real daphne, while PostgreSQL, Redis, the web server and the
   worker (busy with a stream of ``selftest`` jobs) are each killed with SIGKILL in turn and
   come back (the servers by their supervisor, daphne on its port, a fresh worker, the reaper
   and the resender running); then every point the product answered for must be stored
   exactly once, and every job must have succeeded with its points once each.  In a child
   process with its own embedded PostgreSQL and Redis.  ``--soak-seconds``: ten minutes by
   default, longer (or shorter) by the flag.
4. + 5. **schemathesis** (``tests/web/test_openapi_fuzz.py``) and the **authorization
   matrix** (``tests/web/test_authorization_matrix.py``), run by pytest, read from what they print.
"""
from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import figures  # noqa: E402  (no Django)

from opdweb.embedded_servers import free_port, reachable, start_embedded_redis  # noqa: E402  (no Django)
from opdweb.supervisor import Supervisor  # noqa: E402

FAST = {  # for the workers and this process: beats, staleness and resending in seconds, not minutes
    "JOB_HEARTBEAT_SECONDS": "0.3",
    "JOB_STALE_SECONDS": "2",
    "JOB_RESEND_SECONDS": "1",
    "CONN_MAX_AGE": "0",
    "PYTHONUNBUFFERED": "1",
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
}


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def shut_down_redis(child) -> None:
    """Stop an embedded Redis of this benchmark (its supervised child)."""
    child.stop(time.monotonic() + 15)


class Child:
    """A child process in its own process group, its output in a log file."""

    def __init__(self, name: str, command: list[str], env: dict, log_dir: Path):
        self.name = name
        self.log = open(log_dir / f"{name}.log", "w")
        self.proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=20)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


class Stack:
    """Workers and daphne on the bench database, stopped at the end."""

    def __init__(self, log_dir: Path):
        from harness import child_env

        self.log_dir = log_dir
        self.env = {**child_env(), **FAST}
        self.children: list[Child] = []

    def worker(self, name: str, wait: bool = True, queues: str = "gpu,cpu") -> Child:
        command = [sys.executable, "-m", "celery", "-A", "opdweb.celery_app", "worker", "-Q", queues,
                   "--pool", "solo", "-n", f"{name}@bench", "--loglevel", "WARNING", "--without-mingle",
                   "--without-gossip"]
        child = Child(f"worker-{name}", command, self.env, self.log_dir)
        self.children.append(child)
        if wait:
            self.wait_worker(child)
        return child

    def wait_worker(self, child: Child) -> None:
        from opdweb.health.models import WorkerPresence

        name = child.name.removeprefix("worker-") + "@bench"
        wait_for(lambda: WorkerPresence.objects.filter(name=name, pid=child.pid).exists(), 120,
                 f"{name} to report in", 0.2)

    def daphne(self) -> tuple[Child, str]:
        port = free_port()
        child = Child("daphne", [sys.executable, "-m", "opdweb.web_server", "-b", "127.0.0.1", "-p", str(port),
                                 "opdweb.asgi:application"], self.env, self.log_dir)
        self.children.append(child)
        wait_for(lambda: reachable("127.0.0.1", port), 60, "daphne to listen", 0.2)
        return child, f"127.0.0.1:{port}"

    def stop(self) -> None:
        for child in self.children:
            child.stop()
        self.children = []


# ---------------------------------------------------------------- points against the formula

def point_errors(job_id: int, steps: int) -> tuple[int, int]:
    """(points lost or wrong, duplicated rows) of a selftest job, against ``selftest_value``."""
    from django.db import connection

    from workers.science.selftest import SELFTEST_KEYS, selftest_value

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.key, p.step, p.value FROM traces_tracepoint p JOIN traces_traceseries s ON s.id = p.series_id "
            "WHERE s.job_id = %s", [job_id])
        rows = cursor.fetchall()
        cursor.execute(
            "SELECT count(*) - count(DISTINCT (p.series_id, p.step)) FROM traces_tracepoint p "
            "JOIN traces_traceseries s ON s.id = p.series_id WHERE s.job_id = %s", [job_id])
        duplicated = cursor.fetchone()[0]
    stored = {(key, step): value for key, step, value in rows}
    lost = sum(stored.get((key, step)) != selftest_value(key, step) for key in SELFTEST_KEYS for step in range(steps))
    return lost, duplicated


# ---------------------------------------------------------------- 1. worker kill -9 mid-job

def scenario_worker_kill(stack: Stack, team, user, steps: int, sleep_s: float) -> dict:
    from opdweb.health.models import WorkerPresence
    from opdweb.jobs.actions import do_reap_stale_jobs, do_submit_job
    from opdweb.jobs.models import Job, JobState
    from opdweb.traces.models import TraceSeries

    first = stack.worker("kill-first")
    job = do_submit_job(team=team, user=user, kind_name="selftest", config={"steps": steps, "sleep_s": sleep_s})

    def halfway():
        series = TraceSeries.objects.filter(job=job, key="selftest/linear").first()
        return series is not None and series.last_step >= steps // 2

    wait_for(halfway, 60, "the job to reach half way", 0.05)
    first.kill(signal.SIGKILL)
    killed = time.monotonic()
    second = stack.worker("kill-second", wait=False)
    reaped_after = worker_up_after = None
    while time.monotonic() - killed < 120:
        if reaped_after is None and do_reap_stale_jobs():
            reaped_after = time.monotonic() - killed
        if worker_up_after is None and WorkerPresence.objects.filter(name="kill-second@bench", pid=second.pid).exists():
            worker_up_after = time.monotonic() - killed
        job.refresh_from_db()
        if job.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
            break
        time.sleep(0.1)
    outcome_after = time.monotonic() - killed
    lost, duplicated = point_errors(job.pk, steps)
    second.stop()
    return {"steps": steps, "sleep_s": sleep_s, "state": job.state, "attempts": Job.objects.get(pk=job.pk).attempts,
            "reaped_after_s": reaped_after, "worker_up_after_s": worker_up_after, "outcome_after_s": outcome_after,
            "lost": lost, "duplicated": duplicated}


# ---------------------------------------------------------------- 2. Redis kill -9 + restart (child process)

def scenario_redis_child(redis_dir: Path, log_dir: Path, jobs: int, settle: float) -> dict:
    """Runs in a child process whose Django uses the embedded Redis started here."""
    import redis

    url, server = start_embedded_redis(redis_dir)
    supervisor = Supervisor([server])  # as the launcher holds it: started again when it dies
    os.environ["REDIS_URL"] = url
    os.environ.update(FAST)
    from django.conf import settings
    from harness import team_and_user  # noqa: F401  (sets Django up on this Redis)

    from opdweb.jobs.actions import do_resend_lost_messages, do_submit_job
    from opdweb.jobs.broker import waiting_attempts
    from opdweb.jobs.models import Job, JobState
    from opdweb.teams.models import Team

    team = Team.objects.get(slug="bench")
    user = team.memberships.first().user
    stack = Stack(log_dir)
    try:
        submitted = [do_submit_job(team=team, user=user, kind_name="selftest", config={"steps": 20}).pk
                     for _ in range(jobs)]
        waiting_before = len(waiting_attempts(["cpu"]))
        time.sleep(settle)  # 0: killed right after the last submit answered
        pid = int(redis.Redis.from_url(url).info("server")["process_id"])
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()

        def back() -> bool:
            supervisor.check()
            try:
                return int(redis.Redis.from_url(url).info("server")["process_id"]) != pid
            except redis.RedisError:
                return False

        wait_for(back, 30, "the supervisor to start Redis again")
        restarted_after = time.monotonic() - killed
        waiting_after = len(waiting_attempts(["cpu"]))
        stack.worker("redis")
        resent = set()
        while time.monotonic() - killed < 120:
            resent.update(do_resend_lost_messages())
            done = Job.objects.filter(pk__in=submitted, state=JobState.SUCCEEDED).count()
            if done == len(submitted):
                break
            time.sleep(0.25)
        all_done_after = time.monotonic() - killed
        lost = len(submitted) - Job.objects.filter(pk__in=submitted, state=JobState.SUCCEEDED).count()
        stack.stop()
        shut_down_redis(server)
        return {"jobs": len(submitted), "waiting_before": waiting_before, "waiting_after_restart": waiting_after,
                "restarted_after_s": restarted_after, "resent": len(resent),
                "lost": lost, "all_done_after_s": all_done_after, "resend_seconds": settings.JOB_RESEND_SECONDS,
                "settle_s": settle}
    finally:
        stack.stop()


def scenario_redis(tmp: Path, jobs: int, settle: float) -> dict:
    from harness import child_env

    out = subprocess.run([sys.executable, __file__, "--redis-child", str(tmp / "redis-kill"), "--jobs", str(jobs),
                          "--redis-settle", str(settle)],
                         env=child_env(), cwd=ROOT, capture_output=True, text=True, timeout=240)
    result = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not result:
        raise RuntimeError(f"the Redis scenario failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(result[-1].removeprefix("RESULT "))


# ---------------------------------------------------------------- 2b. PostgreSQL kill -9 mid-job (child process)

def scenario_postgres_child(data_dir: Path, log_dir: Path, steps: int, sleep_s: float) -> dict:
    """Runs in a child process whose Django uses the embedded PostgreSQL started here,
    under a supervisor as the launcher holds it; a worker logs a selftest job and the
    server is killed half way."""
    from opdweb.embedded_servers import start_embedded_postgres

    url, server = start_embedded_postgres(data_dir)
    supervisor = Supervisor([server])
    os.environ["DATABASE_URL"] = url
    os.environ.update(FAST)
    from harness import bench_database, team_and_user

    from opdweb.jobs.actions import do_reap_stale_jobs, do_submit_job
    from opdweb.jobs.models import Job, JobState
    from opdweb.traces.models import TraceSeries

    try:
        with bench_database("opdweb_bench_pg_kill"):
            team, user, _ = team_and_user()
            stack = Stack(log_dir)
            try:
                stack.worker("pg")
                job = do_submit_job(team=team, user=user, kind_name="selftest",
                                    config={"steps": steps, "sleep_s": sleep_s})

                def halfway():
                    series = TraceSeries.objects.filter(job=job, key="selftest/linear").first()
                    return series is not None and series.last_step >= steps // 2

                wait_for(halfway, 60, "the job to reach half way", 0.05)
                old = server.pid
                os.kill(old, signal.SIGKILL)
                killed = time.monotonic()
                restarted_after = None
                from django.db import connection

                while time.monotonic() - killed < 180:
                    supervisor.check()
                    try:
                        connection.close()
                        if restarted_after is None and server.alive() and server.pid != old:
                            connection.ensure_connection()
                            restarted_after = time.monotonic() - killed
                        if restarted_after is not None:
                            do_reap_stale_jobs()
                            job.refresh_from_db()
                            if job.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
                                break
                    except Exception:  # noqa: BLE001 - the server is still coming back
                        pass
                    time.sleep(0.2)
                outcome_after = time.monotonic() - killed
                job.refresh_from_db()
                lost, duplicated = point_errors(job.pk, steps)
                attempts = Job.objects.get(pk=job.pk).attempts
            finally:
                stack.stop()
        return {"steps": steps, "sleep_s": sleep_s, "state": job.state, "attempts": attempts,
                "restarted_after_s": restarted_after, "outcome_after_s": outcome_after, "lost": lost,
                "duplicated": duplicated}
    finally:
        supervisor.stop()


def scenario_postgres(tmp: Path, steps: int) -> dict:
    from harness import child_env

    out = subprocess.run([sys.executable, __file__, "--pg-child", str(tmp / "pg-kill"), "--kill-steps", str(steps)],
                         env=child_env(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    result = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not result:
        raise RuntimeError(f"the PostgreSQL scenario failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(result[-1].removeprefix("RESULT "))


# ---------------------------------------------------------------- 6. soak: kill everything in turn under an MLflow run

SOAK_WRITER = """
import json, sys, time
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
seconds, rate = float(sys.argv[1]), int(sys.argv[2])
keys, per_call = 10, rate // 10  # one call every 0.1 s: per_call points, keys x steps
steps_per_call = per_call // keys
client = MlflowClient()
run = client.create_run("0", run_name="soak")
print("RUN " + run.info.run_id, flush=True)
step, started = 0, time.monotonic()
while time.monotonic() - started < seconds:
    due = started + (step // steps_per_call) * 0.1
    if due > time.monotonic():
        time.sleep(due - time.monotonic())
    metrics = [Metric(f"k{k}", s * 0.5 + k, int(time.time() * 1000), s)
               for s in range(step, step + steps_per_call) for k in range(keys)]
    try:
        client.log_batch(run.info.run_id, metrics=metrics)
        print(f"ANSWERED {step} {step + steps_per_call - 1}", flush=True)
    except Exception as exc:  # the client gave up after its retries: not answered
        print(f"REFUSED {step} {step + steps_per_call - 1} {type(exc).__name__}", flush=True)
    step += steps_per_call
client.set_terminated(run.info.run_id)
print("DONE", flush=True)
"""
SOAK_KEYS = 10
SOAK_JOB = {"steps": 200, "sleep_s": 0.05}  # 10 s of work: the worker is always busy


def scenario_soak_child(data_dir: Path, seconds: float, rate: int) -> dict:
    """Runs in a child process whose Django uses the embedded PostgreSQL and Redis started
    here, each under a supervisor as the launcher holds them."""
    from opdweb.embedded_servers import start_embedded_postgres

    pg_url, pg = start_embedded_postgres(data_dir)
    redis_url, rd = start_embedded_redis(data_dir)
    servers = Supervisor([pg, rd])
    os.environ.update({"DATABASE_URL": pg_url, "REDIS_URL": redis_url, **FAST})
    import redis
    from django.db import connection
    from harness import bench_database, team_and_user

    from opdweb.health.models import WorkerPresence
    from opdweb.jobs.actions import do_reap_stale_jobs, do_resend_lost_messages, do_submit_job
    from opdweb.jobs.models import Job, JobState
    from opdweb.runs.models import MlflowRun
    from opdweb.tokens.actions import do_create_token

    def quietly(action):
        """``action()``, or None while a server is down (the soak's own bookkeeping)."""
        try:
            return action()
        except Exception:  # noqa: BLE001
            connection.close()
            return None

    try:
        with bench_database("opdweb_bench_soak"):
            team, user, _ = team_and_user()
            _, secret = do_create_token(user=user, team=team, name="soak", can_write=True)
            stack = Stack(data_dir)
            port = free_port()

            def start_daphne() -> Child:
                child = Child("daphne", [sys.executable, "-m", "opdweb.web_server", "-b", "127.0.0.1", "-p",
                                         str(port), "opdweb.asgi:application"], stack.env, data_dir)
                stack.children.append(child)
                return child

            def fresh_connection() -> bool:
                connection.close()  # not the one opened before the kill: its backend may linger a moment
                connection.ensure_connection()
                return True

            def back(target: str, killed_pid: int) -> bool:
                """Whether a killed ``target`` serves again (a worker: a fresh one reported in)."""
                if target == "PostgreSQL":
                    return pg.alive() and pg.pid != killed_pid and bool(quietly(fresh_connection))
                if target == "Redis":
                    return bool(quietly(lambda: redis.Redis.from_url(redis_url, socket_timeout=1).ping()))
                if target == "web server":
                    return reachable("127.0.0.1", port)
                return bool(quietly(lambda: WorkerPresence.objects.filter(pid=worker.pid).exists()))

            web = start_daphne()
            wait_for(lambda: reachable("127.0.0.1", port), 60, "daphne to listen", 0.2)
            worker = stack.worker("soak-0")
            jobs = [do_submit_job(team=team, user=user, kind_name="selftest", config=SOAK_JOB).pk]
            env = {**stack.env, "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}/mlflow",
                   "MLFLOW_TRACKING_TOKEN": secret, "MLFLOW_DISABLE_TELEMETRY": "true"}
            writer_log = open(data_dir / "writer.log", "w+")
            writer = subprocess.Popen([sys.executable, "-c", SOAK_WRITER, str(seconds), str(rate)], env=env,
                                      cwd=ROOT, stdout=writer_log, stderr=subprocess.STDOUT)
            started = time.monotonic()
            targets = ["PostgreSQL", "Redis", "web server", "worker"]
            period = seconds / (len(targets) + 1)
            kills: list[dict] = []
            workers = 1
            while writer.poll() is None or time.monotonic() - started < seconds:
                now = time.monotonic() - started
                if len(kills) < int(now // period) and now < seconds - period / 2:
                    target = targets[len(kills) % len(targets)]
                    victim = {"PostgreSQL": pg, "Redis": rd, "web server": web, "worker": worker}[target]
                    killed_pid = victim.pid
                    if target in ("PostgreSQL", "Redis"):
                        os.kill(killed_pid, signal.SIGKILL)  # the server process; its supervisor starts it again
                    else:
                        victim.kill(signal.SIGKILL)
                    kills.append({"target": target, "at_s": round(now, 1), "back_after_s": None,
                                  "killed": time.monotonic(), "pid": killed_pid})
                servers.check()  # PostgreSQL and Redis started again on their data
                if web.proc.poll() is not None:
                    web = start_daphne()
                if worker.proc.poll() is not None:
                    worker = stack.worker(f"soak-{workers}", wait=False)
                    workers += 1
                for kill in kills:
                    if kill["back_after_s"] is None and back(kill["target"], kill["pid"]):
                        kill["back_after_s"] = round(time.monotonic() - kill["killed"], 1)
                quietly(do_reap_stale_jobs)
                quietly(do_resend_lost_messages)
                last = quietly(lambda: Job.objects.get(pk=jobs[-1]))
                if last is not None and last.is_terminal and now < seconds:
                    made = quietly(lambda: do_submit_job(team=team, user=user, kind_name="selftest",
                                                         config=SOAK_JOB))
                    if made is not None:
                        jobs.append(made.pk)
                if time.monotonic() - started > seconds + 600:
                    writer.kill()
                    raise RuntimeError("the MLflow writer did not finish within 10 minutes of the soak's end")
                time.sleep(0.2)

            def all_jobs_ended() -> bool:
                servers.check()
                quietly(do_reap_stale_jobs)
                quietly(do_resend_lost_messages)
                return quietly(lambda: Job.objects.filter(pk__in=jobs).exclude(
                    state__in=[JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]).count()) == 0

            wait_for(all_jobs_ended, 300, "the soak's jobs to end", 0.5)
            writer_log.seek(0)
            lines = writer_log.read().splitlines()
            run_id = next(line.split()[1] for line in lines if line.startswith("RUN "))
            answered = {(f"k{k}", step) for line in lines if line.startswith("ANSWERED ")
                        for step in range(int(line.split()[1]), int(line.split()[2]) + 1) for k in range(SOAK_KEYS)}
            refused = sum(1 for line in lines if line.startswith("REFUSED "))
            run_job = MlflowRun.objects.get(run_id=run_id).job_id
            with connection.cursor() as cursor:
                cursor.execute("SELECT s.key, p.step, p.value FROM traces_tracepoint p JOIN traces_traceseries s "
                               "ON s.id = p.series_id WHERE s.job_id = %s", [run_job])
                rows = cursor.fetchall()
            stored = {(key, step): value for key, step, value in rows}
            lost = len([point for point in answered if point not in stored])
            wrong = sum(1 for (key, step), value in stored.items() if value != step * 0.5 + int(key[1:]))
            states = dict(Job.objects.filter(pk__in=jobs).values_list("pk", "state"))
            job_errors = [point_errors(pk, SOAK_JOB["steps"]) for pk in jobs]
            stack.stop()
        shown = [{k: v for k, v in kill.items() if k not in ("killed", "pid")} for kill in kills]
        return {"seconds": seconds, "rate": rate, "kills": shown,
                "answered": len(answered), "refused_batches": refused, "stored": len(rows),
                "stored_distinct": len(stored), "lost": lost, "wrong": wrong,
                "extra": len(set(stored) - answered), "jobs": len(jobs),
                "jobs_succeeded": sum(state == JobState.SUCCEEDED for state in states.values()),
                "job_points_lost": sum(e[0] for e in job_errors),
                "job_points_duplicated": sum(e[1] for e in job_errors),
                "load_at_end": os.getloadavg()[0]}
    finally:
        servers.stop()


def scenario_soak(tmp: Path, seconds: float, rate: int) -> dict:
    from harness import child_env

    out = subprocess.run([sys.executable, __file__, "--soak-child", str(tmp / "soak"), "--soak-seconds",
                          str(seconds), "--soak-rate", str(rate)],
                         env=child_env(), cwd=ROOT, capture_output=True, text=True, timeout=seconds + 1200)
    result = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not result:
        raise RuntimeError(f"the soak failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(result[-1].removeprefix("RESULT "))


# ---------------------------------------------------------------- 3. websocket clients + logging jobs

def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def follow(host: str, cookie: str, job_id: int, steps: int, replayed: asyncio.Event | None, counter: list):
    """One page: resume from nothing, acknowledge every points message; until the job
    ended and every point arrived (or 10 s after it ended).  Returns (received, latencies)."""
    from websockets.asyncio.client import connect

    received, latencies = [], []
    live = False
    ended_at = None
    expected = 2 * steps
    url, headers = f"ws://{host}/ws/jobs/{job_id}/", {"Cookie": cookie, "Origin": "http://127.0.0.1"}
    async with connect(url, additional_headers=headers, max_size=None, open_timeout=60) as ws:
        await ws.send(json.dumps({"type": "resume", "after": {}}))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if ended_at is not None and len({(p[0], p[1]) for p in received}) >= expected:
                break
            wait = 10 - (time.monotonic() - ended_at) if ended_at is not None else deadline - time.monotonic()
            try:
                msg = json.loads(await asyncio.wait_for(ws.recv(), max(0.1, wait)))
            except asyncio.TimeoutError:
                break
            now = time.time()
            if msg["type"] == "points":
                received.extend(msg["points"])
                if live:
                    latencies.extend((p[2], now - p[2]) for p in msg["points"])
                await ws.send(json.dumps({"type": "ack", "seq": msg["seq"]}))
            elif msg["type"] == "replayed":
                live = True
                counter[0] += 1
                if counter[0] == counter[1]:
                    replayed.set()
            elif msg["type"] == "state" and msg["job"]["state"] in ("succeeded", "failed", "cancelled"):
                ended_at = ended_at or time.monotonic()
            elif msg["type"] == "error":
                received.append(["error", msg.get("code"), 0, 0])
    return received, latencies


def scenario_websockets(stack: Stack, team, user, cookie: str, jobs: int, clients: int, steps: int,
                        sleep_s: float) -> dict:
    from harness import percentile

    from opdweb.jobs.actions import check_job_config, enqueue
    from opdweb.jobs.models import Job, JobState
    from workers.science.selftest import SELFTEST_KEYS, selftest_value

    load_at_start = os.getloadavg()[0]
    server, host = stack.daphne()
    workers = [stack.worker(f"ws-{i}", wait=False) for i in range(jobs)]
    for worker in workers:
        stack.wait_worker(worker)
    time.sleep(1)
    rss_before = rss_mb(server.pid)
    kind, config = check_job_config("selftest", {"steps": steps, "sleep_s": sleep_s})
    made = [Job.objects.create(team=team, created_by=user, kind=kind.name, name=f"live {i}", config=config,
                               max_attempts=kind.max_attempts) for i in range(jobs)]
    peak = [rss_before]
    cpu = [0.0, 0.0]  # daphne's and this process's (the clients') CPU seconds while the jobs ran

    def enqueue_all():  # in a thread (it reads the job's kind): not from the event loop
        from django.db import connection

        for job in made:
            enqueue(job.pk, job.attempts)
        connection.close()

    async def run():
        replayed = asyncio.Event()
        counter = [0, jobs * clients]
        tasks = [asyncio.create_task(follow(host, cookie, job.pk, steps, replayed, counter))
                 for job in made for _ in range(clients)]

        async def sample():
            while True:
                peak[0] = max(peak[0], rss_mb(server.pid))
                await asyncio.sleep(0.2)

        sampler = asyncio.create_task(sample())
        await asyncio.wait_for(replayed.wait(), 120)  # every client connected and resumed: now the jobs start
        started = time.monotonic()
        cpu[:] = [cpu_seconds(server.pid), time.process_time()]
        await asyncio.to_thread(enqueue_all)
        results = await asyncio.gather(*tasks)
        elapsed = time.monotonic() - started
        cpu[:] = [cpu_seconds(server.pid) - cpu[0], time.process_time() - cpu[1]]
        sampler.cancel()
        return results, elapsed

    results, elapsed = asyncio.run(run())
    missing = duplicated = errors = 0
    latencies = []
    for received, lat in results:
        errors += sum(1 for p in received if p[0] == "error")
        points = [p for p in received if p[0] != "error"]
        keys = {(p[0], p[1]) for p in points}
        duplicated += len(points) - len(keys)
        good = {(p[0], p[1]) for p in points if p[3] == selftest_value(p[0], p[1])}
        missing += sum((key, step) not in good for key in SELFTEST_KEYS for step in range(steps))
        latencies.extend(lat)
    states = sorted({Job.objects.get(pk=j.pk).state for j in made})
    stored = [point_errors(j.pk, steps) for j in made]
    for worker in workers:
        worker.stop()
    time.sleep(3)
    rss_after = rss_mb(server.pid)
    ms = [x * 1000 for _, x in latencies]
    # How latency moved while the jobs ran: the median of each quarter of the run, by wall time.
    by_time = [x * 1000 for _, x in sorted(latencies)]
    quarters = [percentile(by_time[i * len(by_time) // 4:(i + 1) * len(by_time) // 4], 50) for i in range(4)]
    return {"jobs": jobs, "clients": jobs * clients, "steps": steps, "sleep_s": sleep_s, "keys": 2, "states": states,
            "delivered": sum(len(r[0]) for r in results), "missing": missing, "duplicated": duplicated,
            "errors": errors,
            "stored_lost": sum(s[0] for s in stored), "stored_duplicated": sum(s[1] for s in stored),
            "live_points": len(ms), "min_ms": min(ms) if ms else float("nan"), "p50_by_quarter_ms": quarters,
            "p50_ms": percentile(ms, 50), "p95_ms": percentile(ms, 95),
            "max_ms": max(ms) if ms else float("nan"), "seconds": elapsed, "daphne_cpu_s": cpu[0],
            "clients_cpu_s": cpu[1],
            "rss_before_mb": rss_before, "rss_peak_mb": peak[0], "rss_after_mb": rss_after,
            "all_succeeded": states == [JobState.SUCCEEDED], "load_at_start": load_at_start}


def fan_out_row(ws: dict) -> dict:
    return {"id": "fan-out", "page": "docs/reliability.md", "page_title": "reliability",
            "what": f"live latency, {ws['jobs']} jobs logging at once × {ws['clients'] // ws['jobs']} websocket "
                    "clients each (every message acknowledged, as the page does)",
            "latest": f"p95 {ws['p95_ms']:.0f} ms (p50 {ws['p50_ms']:.0f} ms, max {ws['max_ms']:.0f} ms); "
                      f"{ws['missing']} missing, {ws['duplicated']} duplicated of {ws['delivered']:,} delivered",
            "goal": "p95 ≤ 100 ms quiet, ≤ 250 ms loaded"}


def kills_row(r: dict) -> dict:
    """The README row of the three kill scenarios (all three must have run)."""
    k, pg, x = r["kill"], r["pg"], r["redis"]
    points = " / ".join(f"{s['lost']} of {2 * s['steps']:,}" for s in (k, pg))
    duplicated = k["duplicated"] + pg["duplicated"]
    return {"id": "reliability-kills", "page": "docs/reliability.md", "page_title": "reliability",
            "what": "worker / embedded PostgreSQL `kill -9` mid-job; Redis `kill -9`",
            "latest": f"{points} points lost, {duplicated} duplicated (jobs {k['state']} / {pg['state']}); "
                      f"{x['lost']} of {x['jobs']} jobs lost",
            "goal": "nothing lost"}


def schemathesis_row(t: dict) -> dict:
    verdict = "passed" if t["returncode"] == 0 else "FAILED"
    return {"id": "schemathesis", "page": "docs/reliability.md", "page_title": "reliability",
            "what": f"schemathesis against the OpenAPI document ({t['fuzz_examples']} examples per operation and "
                    "phase)",
            "latest": f"{t['fuzz_requests']:,} requests, {t['fuzz_5xx']} × 5xx; the test {verdict}",
            "goal": "0 × 5xx"}


# ---------------------------------------------------------------- 4. + 5. the two test modules

def scenario_tests(fuzz_examples: int) -> dict:
    env = {**os.environ, "OPENAPI_FUZZ_EXAMPLES": str(fuzz_examples), "PYTHONUNBUFFERED": "1"}
    for key in FAST:
        env.pop(key, None)
    command = [sys.executable, "-m", "pytest", "tests/web/test_openapi_fuzz.py",
               "tests/web/test_authorization_matrix.py", "-s", "-q", "-p", "no:cacheprovider", "-p", "no:logging"]
    started = time.monotonic()
    out = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    text = out.stdout + out.stderr
    fuzz = re.search(r"schemathesis: (\S+) cases generated, (\d+) requests answered; by status class (\{.*\})", text)
    classes = ast.literal_eval(fuzz.group(3)) if fuzz else {}  # a dict printed by the test
    matrix = re.findall(r"authorization matrix \((.*?)\): (\d+) cells, (\d+) wrong", text)
    summary = re.search(r"(\d+ (passed|failed).*) in [\d.]+s", text)
    return {"fuzz_examples": fuzz_examples, "fuzz_cases": fuzz.group(1) if fuzz else None,
            "fuzz_requests": int(fuzz.group(2)) if fuzz else None, "fuzz_classes": classes,
            "fuzz_5xx": classes.get("5xx", 0) if fuzz else None,
            "matrix": {part: (int(cells), int(wrong)) for part, cells, wrong in matrix},
            "pytest": summary.group(1) if summary else text[-2000:], "returncode": out.returncode,
            "seconds": time.monotonic() - started}


# ---------------------------------------------------------------- the table

def table(r: dict) -> str:
    rows = ["| check | rule or result | how |", "|---|---|---|"]
    if "kill" in r:
        k = r["kill"]
        reaped = f"{k['reaped_after_s']:.1f} s" if k["reaped_after_s"] is not None else "never"
        up = f"{k['worker_up_after_s']:.1f} s" if k["worker_up_after_s"] is not None else "?"
        rows.append(
            f"| worker kill -9 mid-job | **{k['state']}** (attempt {k['attempts']}) "
            f"**{k['outcome_after_s']:.1f} s after the kill** (reaped and requeued after {reaped}, the fresh worker "
            f"up after {up}); **{k['lost']} points lost, {k['duplicated']} duplicated** of {2 * k['steps']:,} "
            f"| `selftest` {k['steps']} steps × {k['sleep_s']} s, the worker SIGKILLed at step {k['steps'] // 2}, "
            f"a fresh worker started, `JOB_STALE_SECONDS=2`; the second attempt runs again from step 0 and the "
            f"stored steps are not written twice |")
    if "redis" in r:
        x = r["redis"]
        rows.append(
            f"| Redis kill -9 + restart | **{x['lost']} of {x['jobs']} jobs lost**; all done "
            f"{x['all_done_after_s']:.1f} s after the kill ({x['waiting_after_restart']} of {x['waiting_before']} "
            f"messages back from the append-only file, {x['resent']} sent again; started again by its supervisor "
            f"{x['restarted_after_s']:.1f} s after the kill, on its port) | {x['jobs']} queued `selftest` jobs, no "
            f"worker; SIGKILL {x['settle_s']:g} s after the last submit answered, the embedded Redis under a "
            f"`Supervisor` as the launcher holds it, a worker, `do_resend_lost_messages` "
            f"(`JOB_RESEND_SECONDS={x['resend_seconds']:g}`) |")
    if "pg" in r:
        x = r["pg"]
        rows.append(
            f"| PostgreSQL kill -9 mid-job | **{x['state']}** (attempt {x['attempts']}) {x['outcome_after_s']:.1f} s "
            f"after the kill (started again by its supervisor after {x['restarted_after_s'] or float('nan'):.1f} s); "
            f"**{x['lost']} points lost, {x['duplicated']} duplicated** of {2 * x['steps']} | `selftest` "
            f"{x['steps']} steps × {x['sleep_s']:g} s on a worker, the embedded PostgreSQL (under a `Supervisor` as "
            f"the launcher holds it) SIGKILLed at step {x['steps'] // 2}, the reaper running |")
    if "soak" in r:
        x = r["soak"]
        kills = ", ".join(f"{k['target']} at {k['at_s']:.0f} s (back after {k['back_after_s']} s)" for k in x["kills"])
        rows.append(
            f"| soak: an MLflow run at {x['rate']:,} points/s for {x['seconds']:.0f} s, PostgreSQL, Redis, the web "
            f"server and the worker each killed -9 in turn | **{x['lost']} of {x['answered']:,} answered points "
            f"lost, {x['stored'] - x['stored_distinct']} stored twice**, {x['wrong']} wrong ({x['extra']} more "
            f"stored from batches whose answer the kill cut off; {x['refused_batches']} batches the client gave up "
            f"on); {x['jobs_succeeded']} of {x['jobs']} worker jobs succeeded, {x['job_points_lost']} of their "
            f"points lost, {x['job_points_duplicated']} duplicated | the official client (`log_batch` of 100 every "
            f"0.1 s, its own retries), a real daphne restarted on its port, the embedded servers under a "
            f"`Supervisor`, `selftest` jobs back to back on the worker, the reaper and the resender running; kills: "
            f"{kills}; load average {x['load_at_end']:.1f} at the end |")
    if "ws" in r:
        w = r["ws"]
        rows.append(
            f"| {w['clients']} websocket clients + {w['jobs']} logging jobs | **{w['missing']} points missing, "
            f"{w['duplicated']} duplicated** over {w['delivered']:,} delivered ({w['errors']} errors; jobs "
            f"{'/'.join(w['states'])}; stored: {w['stored_lost']} lost, {w['stored_duplicated']} duplicated); "
            f"live latency p50 {w['p50_ms']:.0f} ms, **p95 {w['p95_ms']:.0f} ms**, max {w['max_ms']:.0f} ms; "
            f"daphne RSS **{w['rss_before_mb']:.0f} MB before, {w['rss_peak_mb']:.0f} MB at peak, "
            f"{w['rss_after_mb']:.0f} MB after** | {w['clients'] // w['jobs']} clients per job, each resumes and "
            f"acks every message; `selftest` {w['steps']} steps × 2 keys × {w['sleep_s']} s, one solo worker per "
            f"job; {w['seconds']:.1f} s from the first job's start to the last client's last point, daphne "
            f"{w['daphne_cpu_s']:.1f} CPU-s, the clients {w['clients_cpu_s']:.1f} CPU-s; load average "
            f"{w['load_at_start']:.1f} when it started |")
    if "tests" in r:
        t = r["tests"]
        if t["fuzz_requests"] is None:
            rows.append("| schemathesis | did not report (see `tests/web/test_openapi_fuzz.py`) | |")
        else:
            classes = ", ".join(f"{v:,} × {k}" for k, v in sorted(t["fuzz_classes"].items()))
            verdict = "0 schema or status violations" if t["returncode"] == 0 else "FAILED (see the test)"
            rows.append(
                f"| schemathesis against `/api/openapi.json` (every operation; examples, coverage, fuzzing and "
                f"stateful phases; a member's session; seed fixed, {t['fuzz_examples']} examples per operation and "
                f"phase) | **{int(t['fuzz_cases']):,} cases, {t['fuzz_requests']:,} requests: {t['fuzz_5xx']} × 5xx, "
                f"{verdict}** ({classes}) | `tests/web/test_openapi_fuzz.py` (part of `make test`; "
                f"`OPENAPI_FUZZ_EXAMPLES=N` for a longer run) |")
        cells = sum(c for c, _ in t["matrix"].values())
        wrong = sum(w for _, w in t["matrix"].values())
        parts = ", ".join(f"{c} {part}" for part, (c, _) in t["matrix"].items())
        rows.append(
            f"| authorization matrix: 2 teams × 4 roles, a teamless user and anonymous, on both teams' jobs; "
            f"every API endpoint, page and the websocket; expected answers from the rule | **{cells} cells, "
            f"{wrong} wrong** ({parts}) | `tests/web/test_authorization_matrix.py` |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="opdweb_bench_reliability")
    parser.add_argument("--only", default="kill,redis,pg,soak,ws,tests", help="scenarios to run, comma separated")
    parser.add_argument("--kill-steps", type=int, default=400)
    parser.add_argument("--redis-jobs", type=int, default=20)
    parser.add_argument("--redis-settle", type=float, default=0.0, help="seconds between the last submit and the kill")
    parser.add_argument("--ws-jobs", type=int, default=5)
    parser.add_argument("--ws-clients-per-job", type=int, default=10)
    parser.add_argument("--ws-steps", type=int, default=300)
    parser.add_argument("--fuzz-examples", type=int, default=25)
    parser.add_argument("--soak-seconds", type=float, default=600.0,
                        help="how long the soak's run logs (ten minutes by default)")
    parser.add_argument("--soak-rate", type=int, default=1000, help="the soak run's points per second")
    parser.add_argument("--record", action="store_true",
                        help="store the README rows of what ran (docs/benchmarks/figures.json): the websocket "
                             "scenario's, the kills' (kill, redis and pg) and schemathesis's")
    parser.add_argument("--keep-logs", action="store_true",
                        help="keep the started processes' logs (their folder is printed on failure)")
    parser.add_argument("--redis-child", help=argparse.SUPPRESS)
    parser.add_argument("--pg-child", help=argparse.SUPPRESS)
    parser.add_argument("--soak-child", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.pg_child:
        result = scenario_postgres_child(Path(args.pg_child), Path(args.pg_child), args.kill_steps, 0.02)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    if args.soak_child:
        result = scenario_soak_child(Path(args.soak_child), args.soak_seconds, args.soak_rate)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    if args.redis_child:
        result = scenario_redis_child(Path(args.redis_child), Path(args.redis_child), args.jobs, args.redis_settle)
        print("RESULT " + json.dumps(result), flush=True)
        return 0

    only = set(args.only.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="opdweb-reliability-"))
    # A Redis of this benchmark's own, before Django reads REDIS_URL.
    redis_url, redis_server = start_embedded_redis(tmp / "main")
    os.environ["REDIS_URL"] = redis_url
    os.environ.update(FAST)
    from harness import bench_database, load, team_and_user

    results: dict = {}
    started = time.monotonic()
    try:
        with bench_database(args.database):
            team, user, cookie = team_and_user()
            stack = Stack(tmp)
            try:
                if "kill" in only:
                    results["kill"] = scenario_worker_kill(stack, team, user, args.kill_steps, 0.02)
                    print("worker kill:", results["kill"], flush=True)
                if "redis" in only:
                    results["redis"] = scenario_redis(tmp, args.redis_jobs, args.redis_settle)
                    print("redis:", results["redis"], flush=True)
                if "pg" in only:
                    results["pg"] = scenario_postgres(tmp, args.kill_steps)
                    print("postgres:", results["pg"], flush=True)
                if "soak" in only:
                    results["soak"] = scenario_soak(tmp, args.soak_seconds, args.soak_rate)
                    print("soak:", results["soak"], flush=True)
                if "ws" in only:
                    results["ws"] = scenario_websockets(stack, team, user, cookie, args.ws_jobs,
                                                        args.ws_clients_per_job, args.ws_steps, 0.01)
                    print("websockets:", results["ws"], flush=True)
            finally:
                stack.stop()
        if "tests" in only:
            results["tests"] = scenario_tests(args.fuzz_examples)
            print("tests:", results["tests"], flush=True)
    except BaseException:
        print(f"(processes' logs in {tmp})", file=sys.stderr)
        raise
    finally:
        shut_down_redis(redis_server)
    print(f"\n{table(results)}\n")
    print(f"({time.monotonic() - started:.0f} s; load average at the end: {load()})")
    if args.record:
        rows = [fan_out_row(results["ws"])] if "ws" in results else []
        if {"kill", "redis", "pg"} <= results.keys():
            rows.append(kills_row(results))
        if results.get("tests", {}).get("fuzz_requests") is not None:
            rows.append(schemathesis_row(results["tests"]))
        if rows:
            figures.record(rows)
    if args.keep_logs:
        print(f"(processes' logs in {tmp})")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
