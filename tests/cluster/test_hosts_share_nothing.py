"""The product across hosts that share nothing: services, web, worker and client hosts, each
in its own network namespace with its own ``var/`` (tests/cluster/cluster.py).  A checkpoint
registered by ``s3://`` URI is read and admission-checked on the worker host, approved and
exported naming the URI; then a second worker host joins while jobs queue and takes some,
a worker host cut off from the network mid-job loses the job to another host without
the job being lost or recorded twice, and interactive work goes first whichever host's
worker frees up."""
from __future__ import annotations

import hashlib
import json
import os
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.cluster.cluster import PY, ROOT, ApiClient, Cluster, Visitor, wait
from tests.hosts import available

pytestmark = [pytest.mark.slow, pytest.mark.needs.with_args(
    lambda: None if available() else "network namespaces need root and the ip tool", installed_by_make=True)]

SHIPPED_STUDENT = Path(__file__).resolve().parents[1] / "science" / "fixtures" / "toy-test" / "student"
URI = "s3://checkpoints/lab/student"
# vLLM's W8A8 FP8 (a scale per tensor: the toy's 64-wide layers take no 128 blocks), FP8 KV cache
FP8 = {"weights": "fp8_e4m3", "weight_scale": "tensor", "activations": "fp8_e4m3", "kv_cache": "fp8_e4m3",
       "kv_scales": "unit"}
SETUP = """
import json
from django.contrib.auth import get_user_model
from opdweb.rollouts.actions import do_create_config
from opdweb.teams.models import Membership, Role, Team
from opdweb.tokens.actions import do_create_token
User = get_user_model()
team = Team.objects.create(slug="lab", name="Lab")
alice = User.objects.create_user("alice", password="alice-pass-1234")
bob = User.objects.create_user("bob", password="bob-pass-1234")
Membership.objects.create(team=team, user=alice, role=Role.MEMBER)
Membership.objects.create(team=team, user=bob, role=Role.APPROVER)
_, secret = do_create_token(user=alice, team=team, name="cluster", can_write=True)
record, _ = do_create_config(team=team, user=alice, name="fp8 w+kv", data=%r)
print(json.dumps({"token": secret, "config": record.pk}))
""" % (FP8,)
BUDGET = """
import json
from opdweb.budgets.models import MismatchBudget
from opdweb.jobs.models import Job, JobState
from opdweb.jobs.runner import record_outcome
from opdweb.teams.models import Team
from tests.web.results import calibration_result
team = Team.objects.get(slug="lab")
job = Job.objects.create(team=team, kind="calibration", config={}, state=JobState.RUNNING)
assert record_outcome(job, JobState.SUCCEEDED, {"result": calibration_result(%r, 1000.0, checkpoint_hash=%r)})
print(json.dumps({"budget": MismatchBudget.objects.get(calibration_job=job).pk}))
"""


def hand_digest(folder: Path) -> str:
    lines = b""
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        lines += name.encode() + b"\0" + hashlib.sha256((folder / name).read_bytes()).hexdigest().encode() + b"\n"
    return hashlib.sha256(lines).hexdigest()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("cluster"), JOB_HEARTBEAT_SECONDS="0.5", JOB_STALE_SECONDS="5",
                      JOB_FETCH_RETRY_SECONDS="2")
    try:
        cluster.start()
        cluster.ids = cluster.shell(SETUP)
        cluster.upload(SHIPPED_STUDENT, "checkpoints", "lab/student")
        cluster.add_worker("worker1")
        yield cluster
    finally:
        cluster.close()
    assert not [ns for ns in os.popen("ip netns list").read().split() if ns.startswith(cluster.network.prefix)]


def no_checkpoint_under(host) -> list[str]:
    return [str(p) for p in (host.dir).rglob("*.safetensors")]


def logs(cluster) -> list[Path]:
    return [cluster.web.dir / "web.log", *(h.dir / "worker.log" for h, _ in cluster.workers.values())]


def test_the_loop_runs_on_hosts_that_share_nothing(cluster):
    alice, bob = Visitor(cluster, "alice", "alice-pass-1234"), Visitor(cluster, "bob", "bob-pass-1234")
    api = ApiClient(cluster, cluster.ids["token"])

    r = alice.post("/models/", {"team": "lab", "name": "student", "path": URI, "kind": "student"})
    assert r.status_code == 302, r.text[-2000:]
    digest = wait(lambda: (rows := cluster.sql("SELECT digest FROM registry_checkpointdescription WHERE uri = %s",
                                                [URI])) and rows[0][0], 300, "the worker host to read the checkpoint",
                  logs=logs(cluster))
    assert digest == hand_digest(SHIPPED_STUDENT)
    assert digest[:12] in alice.get("/models/").text

    budget = cluster.shell(BUDGET % (URI, digest))["budget"]
    r = api.request("POST", "/api/jobs", json={"kind": "admission", "team": "lab", "config": {
        "model": URI, "rollout": FP8, "budget": budget, "prompts": 16, "max_new_tokens": 8, "bootstrap": 50,
        "drift": False, "device": "cpu"}})
    assert r.status_code in (200, 201), r.text
    job = api.wait_job(r.json()["id"], logs=logs(cluster))
    assert job["state"] == "succeeded", (job["error"], job.get("message"))
    assert "@worker1" in job["worker"] and job["result"]["verdict"] == "pass"
    assert job["result"]["checkpoint_hash"] == digest and job["config"]["model"] == URI

    r = alice.post(f"/configs/{cluster.ids['config']}/request-approval/", {"checkpoint": URI, "comment": "run 12"})
    assert r.status_code == 302, r.text[-2000:]
    approval = cluster.sql("SELECT id FROM approvals_approvalrequest ORDER BY id DESC LIMIT 1")[0][0]
    assert bob.post(f"/approvals/{approval}/decide/", {"decision": "approve", "comment": "ok"}).status_code == 302
    exported = alice.post(f"/approvals/{approval}/export/vllm/", {})
    assert exported.status_code == 200 and URI in exported.text, exported.text[-2000:]

    # Each host kept to its own disk: the weights are in the worker host's cache only.
    worker1 = cluster.workers["worker1"][0]
    assert (worker1.dir / "var" / "cache" / "checkpoints" / digest / "model.safetensors").read_bytes() == \
        (SHIPPED_STUDENT / "model.safetensors").read_bytes()
    assert no_checkpoint_under(cluster.web) == []



def selftest(api, steps: int, sleep_s: float) -> int:
    r = api.request("POST", "/api/jobs", json={"kind": "selftest", "team": "lab",
                                               "config": {"steps": steps, "sleep_s": sleep_s}})
    assert r.status_code in (200, 201), r.text
    return r.json()["id"]


def host_of(job: dict) -> str:
    """``cpu@worker2:1234`` -> ``worker2``: the host a job ran on, as its worker names it."""
    return job["worker"].split("@", 1)[1].split(":", 1)[0]


@pytest.mark.faults
def test_a_worker_host_added_while_jobs_queue_takes_some(cluster):
    api = ApiClient(cluster, cluster.ids["token"])
    jobs = [selftest(api, steps=40, sleep_s=0.25) for _ in range(4)]  # 10 s each on one cpu worker
    cluster.add_worker("worker2")  # its workers report in within seconds; three jobs still wait
    done = [api.wait_job(job, logs=logs(cluster)) for job in jobs]
    assert [j["state"] for j in done] == ["succeeded"] * 4
    assert {host_of(j) for j in done} == {"worker1", "worker2"}, [j["worker"] for j in done]
    assert all(j["result"]["last"]["selftest/square"] == 39.0 ** 2 for j in done)


@pytest.mark.faults
def test_a_worker_host_cut_off_mid_job_loses_it_to_another_and_nothing_is_doubled(cluster):
    """The host running the job loses its cable: its heartbeat stops, the reaper (on the web
    host) queues the job again, the other worker host runs it; when the cable is back, the
    cut host's late outcome is refused and every step is stored once."""
    api = ApiClient(cluster, cluster.ids["token"])
    steps = 80
    job_id = selftest(api, steps=steps, sleep_s=0.25)  # 20 s
    running = wait(lambda: (j := api.job(job_id))["state"] == "running" and j["progress"] > 0.1 and j, 120,
                   "the job to run", logs=logs(cluster))
    cut = cluster.workers[host_of(running)][0]
    cut.cut()
    try:
        job = api.wait_job(job_id, timeout=300, logs=logs(cluster))
    finally:
        cut.heal()
    assert job["state"] == "succeeded" and job["attempts"] == 2, (job["state"], job["attempts"], job["error"])
    assert host_of(job) != cut.name
    time.sleep(8)  # the healed host's worker reaches the database again and tries to finish
    after = api.job(job_id)
    assert (after["state"], after["attempts"], after["worker"], after["result"]) == \
        (job["state"], job["attempts"], job["worker"], job["result"])
    rows = cluster.sql("SELECT s.key, count(*), min(p.step), max(p.step), sum(p.value) FROM traces_traceseries s "
                       "JOIN traces_tracepoint p ON p.series_id = s.id WHERE s.job_id = %s GROUP BY s.key "
                       "ORDER BY s.key", [job_id])
    assert rows == [("selftest/linear", steps, 0, steps - 1, sum(range(steps))),
                    ("selftest/square", steps, 0, steps - 1, sum(s * s for s in range(steps)))]
    # and the cut host serves again
    wait(lambda: cluster.sql("SELECT count(*) FROM health_workerpresence WHERE name LIKE %s AND NOT stopped "
                             "AND last_seen > now() - interval '10 seconds'", [f"%@{cut.name}"])[0][0] >= 2, 120,
         f"{cut.name} to report in again", logs=logs(cluster))


HOLD_SERIES = """
import json, time
import numpy as np
from opdweb.jobs.models import Job, JobState
from opdweb.teams.models import Team
from opdweb.traces.batches import write_points
job = Job.objects.create(team=Team.objects.get(slug="lab"), kind="selftest", config={}, state=JobState.RUNNING)
def hold():  # the series row is claimed, the points not yet sent: the host's cable goes now
    print(json.dumps({"job": job.pk}), flush=True)
    time.sleep(3600)
write_points(job.pk, {"selftest/linear": (np.arange(3), np.zeros(3), np.arange(3.0))}, copying=hold)
"""
TAKE_SERIES = """
import json, time
import numpy as np
from django.db import connection
from psycopg.errors import LockNotAvailable
from opdweb.traces.batches import write_points
connection.cursor().execute("SET lock_timeout = '%ds'")
start = time.monotonic()
try:
    write_points(%d, {"selftest/linear": (np.arange(5), np.ones(5), np.arange(5.0) * 10)})
    print(json.dumps({"waited_s": time.monotonic() - start}))
except LockNotAvailable:
    print(json.dumps({"waited_s": None}))
"""


@pytest.mark.faults
def test_a_host_cut_off_inside_a_transaction_lets_go_of_its_locks(cluster):
    """A worker host's trace sink has claimed a series row (its transaction open) when the
    host's cable is pulled.  Nothing closes the socket, so PostgreSQL would keep the
    transaction, and the lock the next attempt's writes wait on, until TCP keepalive's two
    hours were up; with the product's connection settings it drops the silent client within
    DB_DEAD_PEER_SECONDS and the other host's write goes through."""
    from django.conf import settings

    dead_s = settings.DB_DEAD_PEER_SECONDS  # the hosts inherit this process's settings
    host = cluster.workers["worker1"][0]
    holder = host.start("holder", [PY, str(ROOT / "manage.py"), "shell", "-c", HOLD_SERIES], cluster.env_of(host),
                        cwd=ROOT)
    try:
        job_id = wait(lambda: holder.log_path.exists() and '{"job"' in (text := holder.log_path.read_text()) and
                      json.loads(text[text.index('{"job"'):].splitlines()[0])["job"], 120, "the series to be claimed",
                      logs=[holder.log_path])
        assert cluster.shell(TAKE_SERIES % (2, job_id)) == {"waited_s": None}  # the claim holds the row
        host.cut()
        try:
            taken = cluster.shell(TAKE_SERIES % (dead_s * 3, job_id))
        finally:
            host.heal()
    finally:
        host.kill(holder)
    assert taken["waited_s"] is not None, f"still locked after {dead_s * 3} s"
    assert taken["waited_s"] < dead_s + 15, taken
    rows = cluster.sql("SELECT p.step, p.value FROM traces_traceseries s JOIN traces_tracepoint p "
                       "ON p.series_id = s.id WHERE s.job_id = %s ORDER BY p.step", [job_id])
    assert rows == [(step, step * 10.0) for step in range(5)]  # the cut host's points were never committed


def store_pids(cluster) -> list[int]:
    out = os.popen(f"ip netns pids {cluster.services.namespace}").read().split()
    return [int(pid) for pid in out if "weed" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            and Path(f"/proc/{pid}").exists()]


@pytest.mark.faults
def test_the_object_store_killed_as_a_worker_reads_comes_back_and_the_read_completes(cluster):
    """kill -9 of the services host's SeaweedFS just as a checkpoint is registered: the
    services host starts it again on its data, the worker's fetch retries (the job is queued
    again if the store stays away), and the checkpoint is read whole; no partial download is
    left in any worker's cache."""
    teacher = SHIPPED_STUDENT.parent / "teacher"
    cluster.upload(teacher, "checkpoints", "lab/teacher")
    alice = Visitor(cluster, "alice", "alice-pass-1234")
    killed = store_pids(cluster)
    assert killed
    for pid in killed:
        os.kill(pid, 9)
    r = alice.post("/models/", {"team": "lab", "name": "teacher", "path": "s3://checkpoints/lab/teacher",
                                "kind": "teacher"})
    assert r.status_code == 302, r.text[-2000:]
    digest = wait(lambda: (rows := cluster.sql("SELECT digest FROM registry_checkpointdescription WHERE uri = %s",
                                                ["s3://checkpoints/lab/teacher"])) and rows[0][0], 300,
                  "the teacher to be read", logs=[*logs(cluster), cluster.services.dir / "services.log"])
    assert digest == hand_digest(teacher)
    assert store_pids(cluster) and set(store_pids(cluster)).isdisjoint(killed)  # a new store process
    for host, _ in cluster.workers.values():  # a host that never fetched has no cache at all
        partial = host.dir / "var" / "cache" / "checkpoints" / ".partial"
        assert not partial.exists() or list(partial.iterdir()) == []


def test_interactive_work_goes_first_whichever_host_frees_up(cluster):
    """The scheduling rules across hosts: four training runs are queued before a measurement
    on two worker hosts' gpu workers; the measurement still starts before every run that
    was waiting when it came (its priority is in the broker every host's workers take from,
    and a running training run makes way for it), and the runs end on both hosts."""
    if "worker2" not in cluster.workers:
        cluster.add_worker("worker2")
    teacher = "s3://checkpoints/lab/teacher"
    cluster.upload(SHIPPED_STUDENT.parent / "teacher", "checkpoints", "lab/teacher")
    api = ApiClient(cluster, cluster.ids["token"])

    def submit(kind: str, config: dict) -> int:
        r = api.request("POST", "/api/jobs", json={"kind": kind, "team": "lab", "config": config})
        assert r.status_code in (200, 201), r.text
        return r.json()["id"]

    train = {"model": URI, "teacher": teacher, "method": "opd", "loss": "full", "steps": 60, "batch_size": 8,
             "eval_every": 60, "eval_prompts": 50, "device": "cpu"}
    trains = [submit("train", train) for _ in range(4)]
    wait(lambda: sum(api.job(t)["state"] == "running" for t in trains) == 2, 300, "two runs to train",
         logs=logs(cluster))
    measure = submit("mismatch", {"model": URI, "rollout": FP8, "prompts": 8, "max_new_tokens": 4,
                                  "bootstrap": 50, "target_ci": 0, "device": "cpu"})
    measured = api.wait_job(measure, logs=logs(cluster))
    assert measured["state"] == "succeeded", measured["error"]
    ended = [api.wait_job(t, logs=logs(cluster)) for t in trains]
    assert [j["state"] for j in ended] == ["succeeded"] * 4, [j["error"] for j in ended]
    # Every run that (re)started after the measurement came started after the measurement did.
    came, started = (datetime.fromisoformat(measured[k]) for k in ("created_at", "started_at"))
    later = [at for at in (datetime.fromisoformat(j["started_at"]) for j in ended) if at > came]
    assert later and min(later) > started, (came, started, later)
    assert {host_of(j) for j in ended} == {"worker1", "worker2"}, [j["worker"] for j in ended]
