"""Large exports stream: 1M points over a real daphne while the machine is loaded, a slow
reader that pauses mid-body, and an export that never takes in other requests' writes
(under ASGI one thread runs every request's sync code, so an export's transaction held on
that thread's connection would hold theirs too)."""
import csv
import http.client
import io
import json
import subprocess
import sys
import threading
import time

import psycopg
import pytest
from django.db import connection

from opdweb.jobs.models import Job
from opdweb.traces.models import TraceSeries
from opdweb.traces.queries import iter_points
from tests.web.conftest import CEILING_S, database_url, wait_for
from tests.web.factories import JobFactory

POINTS = 1_000_000
KEYS = ("loss", "reward")  # half the points each


def fill(job, per_key: int) -> None:
    """Points with values known in closed form: step s of key k has wall 1e9 + s and value
    s / 4 (+ 1e6 for the second key), all exact in a double."""
    with connection.cursor() as cursor:
        for i, key in enumerate(KEYS):
            series = TraceSeries.objects.create(job=job, key=key, first_step=0, last_step=per_key - 1)
            cursor.execute("INSERT INTO traces_tracepoint (series_id, step, wall_time, value) "
                           "SELECT %s, g, 1e9 + g, g / 4.0 + %s FROM generate_series(0, %s) g",
                           [series.pk, i * 1e6, per_key - 1])


def expected_row(key: str, step: int) -> tuple[float, float]:
    return 1e9 + step, step / 4 + KEYS.index(key) * 1e6


def committed_elsewhere(job_name: str) -> bool:
    """Seen from a connection of its own: committed, not held in someone's transaction."""
    with psycopg.connect(database_url()) as other:
        return other.execute("SELECT count(*) FROM jobs_job WHERE name = %s", [job_name]).fetchone()[0] == 1


def test_an_export_in_progress_does_not_take_in_writes_made_beside_it_on_its_thread(member, transactional_db):
    user, team = member
    job = JobFactory(team=team)
    fill(job, 20_000)
    rows = iter_points(job.pk, chunk=1000)
    assert len(next(rows)) == 1000  # the export has begun and waits for its reader
    Job.objects.create(team=team, created_by=user, kind="selftest", name="written beside", config={})
    try:
        assert committed_elsewhere("written beside"), "the write is held inside the export's transaction"
        assert sum(len(chunk) for chunk in rows) == 40_000 - 1000
    finally:
        rows.close()
    assert committed_elsewhere("written beside")


def read_csv(response, pause_after: int | None = None, pause_s: float = 0.0):
    """Every row of a streamed CSV export, read 64 KiB at a time (pausing once if asked)."""
    text, got, paused = io.StringIO(), 0, False
    while block := response.read(65536):
        text.write(block.decode())
        got += len(block)
        if pause_after is not None and not paused and got >= pause_after:
            time.sleep(pause_s)
            paused = True
    text.seek(0)
    reader = csv.reader(text)
    assert next(reader) == ["key", "step", "wall_time", "value"]
    return list(reader)


def check_rows(rows, per_key: int) -> None:
    assert len(rows) == 2 * per_key
    for i, (key, step, wall, value) in enumerate(rows):
        want_key, want_step = KEYS[i // per_key], i % per_key  # (key, step) order
        assert (key, int(step)) == (want_key, want_step)
        assert (float(wall), float(value)) == expected_row(key, want_step)


@pytest.mark.slow
def test_a_million_points_export_whole_while_the_machine_is_loaded(member, asgi_server, transactional_db):
    from django.test import Client

    user, team = member
    job = JobFactory(team=team)
    fill(job, POINTS // 2)
    browser = Client()
    browser.force_login(user)
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    host, port = asgi_server.split(":")
    # Two busy processes: the 2-core machine fully loaded while the export runs.
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    answers: dict = {}

    def meanwhile():
        """Other requests keep being answered while the export streams."""
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        started = time.monotonic()
        conn.request("GET", f"/api/jobs/{job.pk}", headers={"Cookie": cookie})
        reply = conn.getresponse()
        answers["job"] = (reply.status, json.loads(reply.read())["id"], time.monotonic() - started)

    try:
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        conn.request("GET", f"/api/jobs/{job.pk}/export?format=csv", headers={"Cookie": cookie})
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type") == "text/csv"
        side = threading.Thread(target=meanwhile)
        side.start()
        # The reader stops for 10 s after its first megabyte: no timeout ends the export.
        rows = read_csv(response, pause_after=1 << 20, pause_s=10)
        side.join(60)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    check_rows(rows, POINTS // 2)
    assert answers["job"][:2] == (200, job.pk)


def export_cursors() -> list[str]:
    """What the export's own connection is doing: its last statement, while it is open."""
    with psycopg.connect(database_url()) as other:
        rows = other.execute("SELECT state, query FROM pg_stat_activity WHERE query LIKE 'FETCH%%trace_export_%%' "
                             "AND pid <> pg_backend_pid()").fetchall()
    return [state for state, _ in rows]


@pytest.mark.slow
def test_a_reader_that_stops_reading_holds_the_export_back_not_the_servers_memory(member, asgi_server,
                                                                                   transactional_db):
    """With flow control the export waits at its cursor while its reader does not read; a
    server without it (daphne alone) had produced the whole body into its memory by then,
    its cursor long closed."""
    from django.test import Client

    user, team = member
    job = JobFactory(team=team)
    fill(job, POINTS // 2)
    browser = Client()
    browser.force_login(user)
    host, port = asgi_server.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("GET", f"/api/jobs/{job.pk}/export?format=csv",
                 headers={"Cookie": f"sessionid={browser.cookies['sessionid'].value}"})
    response = conn.getresponse()
    assert response.status == 200
    head = response.read(1 << 20)
    time.sleep(5)  # long enough for the whole body to be produced, were nothing holding it back
    assert export_cursors() == ["idle in transaction"], "the export ran ahead of its reader"
    text = (head + response.read()).decode()
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["key", "step", "wall_time", "value"]
    check_rows(rows[1:], POINTS // 2)
    wait_for(lambda: export_cursors() == [], CEILING_S, "the export's connection to go back once the body is done")
