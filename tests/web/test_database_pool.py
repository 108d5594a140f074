"""The ASGI server runs each request's sync code in a thread of its own; its requests share
a pool of database connections instead of opening one each (a PostgreSQL backend forked
per request cost about 8 ms of a 14 ms API answer)."""
import http.client

from django.db import connection

from tests.web.factories import JobFactory
from tests.web.test_live_channel import session_cookie

REQUESTS = 60
POOL_MAX = 16  # settings: DATABASES["default"]["OPTIONS"]["pool"]["max_size"]


def sessions_opened() -> int:
    """Sessions PostgreSQL has started on the test database so far."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def backends_of_others() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return cursor.fetchone()[0]


def test_requests_share_the_servers_pooled_connections(member, asgi_server, client):
    user, team = member
    job = JobFactory(team=team)
    cookie = session_cookie(client, user)
    conn = http.client.HTTPConnection(asgi_server, timeout=30)

    def get(path: str) -> int:
        conn.request("GET", path, headers={"Cookie": cookie})
        response = conn.getresponse()
        response.read()
        return response.status

    assert get(f"/api/jobs/{job.pk}") == 200  # the pool opens
    before = sessions_opened()
    statuses = [get(f"/api/jobs/{job.pk}" if i % 2 else f"/jobs/{job.pk}/") for i in range(REQUESTS)]
    opened = sessions_opened() - before
    conn.close()
    assert statuses == [200] * REQUESTS
    # Pool connections may still be opening in the background, never one per request.
    assert opened <= POOL_MAX, opened
    assert backends_of_others() <= POOL_MAX


def test_connections_the_database_dropped_are_replaced_without_a_failed_request(member, asgi_server, client):
    """PostgreSQL ends every pooled connection (as a restart or an administrator would);
    the next requests are answered all the same: each connection is checked as the pool
    hands it out."""
    user, team = member
    job = JobFactory(team=team)
    cookie = session_cookie(client, user)
    conn = http.client.HTTPConnection(asgi_server, timeout=30)

    def get() -> int:
        conn.request("GET", f"/api/jobs/{job.pk}", headers={"Cookie": cookie})
        response = conn.getresponse()
        response.read()
        return response.status

    assert [get() for _ in range(5)] == [200] * 5
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        assert cursor.fetchone()[0] >= 1
    assert [get() for _ in range(20)] == [200] * 20
    conn.close()
