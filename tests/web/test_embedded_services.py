"""The embedded default: a real PostgreSQL and Redis started from their wheels, data
kept on disk and found again on the next start."""
import os
import signal
import time
from urllib.parse import unquote

import psycopg
import pytest
import redis

from opdweb.embedded_servers import start_embedded_postgres, start_embedded_redis


def connect(url: str) -> psycopg.Connection:
    """``postgres://postgres@<percent-encoded socket dir>/<db>`` as the settings read it."""
    host, dbname = url.split("@", 1)[1].split("/", 1)
    return psycopg.connect(host=unquote(host), dbname=dbname, user="postgres", autocommit=True)


def test_embedded_postgres_starts_keeps_data_and_stops(tmp_path):
    url, stop = start_embedded_postgres(tmp_path)
    with connect(url) as conn:
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept VALUES (42)")
    stop()
    url_again, stop_again = start_embedded_postgres(tmp_path)
    try:
        with connect(url_again) as conn:
            assert conn.execute("SELECT n FROM kept").fetchone() == (42,)
    finally:
        stop_again()


def test_embedded_redis_starts_keeps_data_and_stops(tmp_path):
    url, stop = start_embedded_redis(tmp_path)
    redis.Redis.from_url(url).set("kept", "yes")
    stop()
    url_again, stop_again = start_embedded_redis(tmp_path)
    try:
        assert redis.Redis.from_url(url_again).get("kept") == b"yes"
    finally:
        stop_again()


def server_pid(url: str) -> int:
    return int(redis.Redis.from_url(url).info("server")["process_id"])


@pytest.mark.faults
def test_embedded_redis_keeps_what_it_had_a_second_before_a_crash(tmp_path):
    url, _ = start_embedded_redis(tmp_path)
    client = redis.Redis.from_url(url)
    client.rpush("queue", "job-1", "job-2")
    time.sleep(1.5)  # appendfsync everysec
    os.kill(server_pid(url), signal.SIGKILL)
    url_again, stop_again = start_embedded_redis(tmp_path)
    try:
        assert redis.Redis.from_url(url_again).lrange("queue", 0, -1) == [b"job-1", b"job-2"]
    finally:
        stop_again()


@pytest.mark.faults
def test_a_server_left_by_a_killed_launcher_is_stopped_and_its_port_reused(tmp_path):
    url, _ = start_embedded_redis(tmp_path)  # never stopped: its launcher was killed
    left_behind = server_pid(url)
    redis.Redis.from_url(url).set("kept", "yes")
    url_again, stop_again = start_embedded_redis(tmp_path)
    try:
        assert url_again == url
        assert server_pid(url_again) != left_behind
        with pytest.raises(ProcessLookupError):
            for _ in range(50):  # the old server exits (its zombie may linger a moment)
                os.kill(left_behind, 0)
                time.sleep(0.1)
        assert redis.Redis.from_url(url_again).get("kept") == b"yes"
    finally:
        stop_again()
