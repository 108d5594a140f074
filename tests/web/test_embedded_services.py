"""The embedded default: a real PostgreSQL and Redis started from their wheels, data
kept on disk and found again on the next start."""
from urllib.parse import unquote

import psycopg
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
