"""The embedded default: a real PostgreSQL and Redis started from their wheels, data
kept on disk and found again on the next start, and started again by their supervisor
when killed."""
import os
import signal
import socket
import time
from urllib.parse import unquote

import psycopg
import pytest
import redis

from opdweb.embedded_servers import Services, free_ports, start_embedded_postgres, start_embedded_redis
from opdweb.supervisor import Supervisor
from tests.web.conftest import wait_for, wait_for_redis_on_disk


def connect(url: str) -> psycopg.Connection:
    """``postgres://postgres@<percent-encoded socket dir>/<db>`` as the settings read it."""
    host, dbname = url.split("@", 1)[1].split("/", 1)
    return psycopg.connect(host=unquote(host), dbname=dbname, user="postgres", autocommit=True)


def stopper(child):
    return lambda: child.stop(time.monotonic() + 15)


def test_picked_ports_are_distinct_free_and_never_ones_the_kernel_hands_out():
    """A port picked for a server that binds it seconds later lies below the kernel's
    ephemeral range, so no outgoing connection or bind to port 0 takes it meanwhile."""
    first_ephemeral = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    if first_ephemeral <= 10000:  # Linux's default is 32768
        pytest.skip(f"this kernel's ephemeral range starts at {first_ephemeral}: it leaves no room below")
    ports = free_ports(8)
    assert len(set(ports)) == 8 and all(1024 <= p < first_ephemeral for p in ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: the bind succeeds
    kernels = []
    for _ in range(200):  # what the kernel hands out meanwhile lies elsewhere
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            kernels.append(s.getsockname()[1])
    assert min(kernels) >= first_ephemeral


def test_a_port_in_use_is_never_picked(monkeypatch):
    a, b = free_ports(2)
    monkeypatch.setattr("opdweb.embedded_servers.quiet_ports", lambda: [a, b])
    with socket.socket() as held:
        held.bind(("127.0.0.1", a))
        held.listen()
        assert {free_ports(1)[0] for _ in range(20)} == {b}
        with pytest.raises(OSError, match="no 2 free ports"):
            free_ports(2)


def test_embedded_postgres_starts_keeps_data_and_stops(tmp_path):
    url, child = start_embedded_postgres(tmp_path)
    with connect(url) as conn:
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept VALUES (42)")
    stopper(child)()
    assert child.proc.returncode == 0  # a fast shutdown, not a kill
    url_again, child_again = start_embedded_postgres(tmp_path)
    try:
        with connect(url_again) as conn:
            assert conn.execute("SELECT n FROM kept").fetchone() == (42,)
    finally:
        stopper(child_again)()


def test_embedded_redis_starts_keeps_data_and_stops(tmp_path):
    url, child = start_embedded_redis(tmp_path)
    redis.Redis.from_url(url).set("kept", "yes")
    stopper(child)()
    url_again, child_again = start_embedded_redis(tmp_path)
    try:
        assert redis.Redis.from_url(url_again).get("kept") == b"yes"
    finally:
        stopper(child_again)()


@pytest.fixture
def supervised(tmp_path):
    """Both embedded servers under their supervisor, as the launcher holds them."""
    services = Services("", "", embedded=True, servers=Supervisor([]))
    try:
        services.database_url, pg = start_embedded_postgres(tmp_path)
        services.servers.children.append(pg)
        services.redis_url, rd = start_embedded_redis(tmp_path)
        services.servers.children.append(rd)
        yield services
    finally:
        services.stop()


def until_restarted(services, child, old_pid: int, ready) -> None:
    def check():
        services.check()
        return child.alive() and child.pid != old_pid and ready()

    wait_for(check, 30, f"the supervisor to start {child.name} again")


def answers_sql(url: str) -> bool:
    try:
        with connect(url) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False


def answers_redis(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


@pytest.mark.faults
def test_a_killed_embedded_postgres_is_started_again_with_every_committed_row(supervised):
    pg = supervised.servers.children[0]
    with connect(supervised.database_url) as conn:
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept SELECT generate_series(1, 1000)")  # committed: must survive
    old = pg.pid
    os.kill(old, signal.SIGKILL)
    until_restarted(supervised, pg, old, lambda: answers_sql(supervised.database_url))
    with connect(supervised.database_url) as conn:
        assert conn.execute("SELECT count(*), sum(n) FROM kept").fetchone() == (1000, 500500)
    assert answers_redis(supervised.redis_url), "the other server was touched"


@pytest.mark.faults
def test_a_killed_embedded_redis_is_started_again_on_its_port_with_its_data(supervised):
    rd = supervised.servers.children[1]
    client = redis.Redis.from_url(supervised.redis_url)
    client.rpush("queue", "job-1", "job-2")
    wait_for_redis_on_disk(client)
    old = rd.pid
    os.kill(old, signal.SIGKILL)
    until_restarted(supervised, rd, old, lambda: answers_redis(supervised.redis_url))
    assert redis.Redis.from_url(supervised.redis_url).lrange("queue", 0, -1) == [b"job-1", b"job-2"]
    assert answers_sql(supervised.database_url), "the other server was touched"


def server_pid(url: str) -> int:
    return int(redis.Redis.from_url(url).info("server")["process_id"])


@pytest.mark.faults
def test_a_redis_server_left_by_a_killed_launcher_is_stopped_and_its_port_reused(tmp_path):
    url, left = start_embedded_redis(tmp_path)  # never stopped: its launcher was killed
    left_behind = server_pid(url)
    redis.Redis.from_url(url).set("kept", "yes")
    url_again, child_again = start_embedded_redis(tmp_path)
    try:
        assert url_again == url
        assert server_pid(url_again) != left_behind
        left.proc.wait(timeout=10)  # the old server was shut down (it saves as it goes)
        assert redis.Redis.from_url(url_again).get("kept") == b"yes"
    finally:
        stopper(child_again)()


@pytest.mark.faults
def test_a_postgres_server_left_by_a_killed_launcher_is_stopped_and_started_again(tmp_path):
    url, left = start_embedded_postgres(tmp_path)  # never stopped: its launcher was killed
    with connect(url) as conn:
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept VALUES (7)")
    url_again, child_again = start_embedded_postgres(tmp_path)
    try:
        assert url_again == url
        left.proc.wait(timeout=30)  # the one left behind was shut down, not killed
        assert left.proc.returncode == 0 and child_again.alive()
        with connect(url_again) as conn:
            assert conn.execute("SELECT n FROM kept").fetchone() == (7,)
    finally:
        stopper(child_again)()
