"""The live channel holds bounded memory per client and follows access: a client that
does not acknowledge stops receiving at its window and catches up from the database when
it does; one that stays behind is closed with 4408; a revoked membership or an ended
session closes an open websocket with 4403."""
import asyncio
import json

from django.db import connection
from websockets.asyncio.client import connect

from opdweb.jobs import live
from opdweb.teams.models import Membership
from opdweb.traces.sink import TraceSink
from tests.web.factories import JobFactory
from tests.web.test_live_channel import session_cookie

LIMITS = {"LIVE_WINDOW_POINTS": "50", "LIVE_BEHIND_SECONDS": "1", "LIVE_ACCESS_RECHECK_SECONDS": "0.5"}
KEY = "limits/value"


def log_points(job, steps: range) -> None:
    """Through the real sink, publishing on the real channel layer, as a worker does."""
    sink = TraceSink(job.pk, publish=lambda messages: live.publish(job.pk, messages))
    try:
        for step in steps:
            sink.add(step, {KEY: float(step)})
    finally:
        sink.close()


def in_thread(fn, *args):
    """Run ``fn`` in a thread of its own (it opens a connection there and closes it)."""
    def run():
        try:
            fn(*args)
        finally:
            connection.close()
    return asyncio.to_thread(run)


async def receive(ws, timeout=10):
    return json.loads(await asyncio.wait_for(ws.recv(), timeout=timeout))


async def open_socket(server, job, cookie):
    ws = await connect(f"ws://{server}/ws/jobs/{job.pk}/", additional_headers={"Cookie": cookie, "Origin": "http://127.0.0.1"})
    await ws.send(json.dumps({"type": "resume", "after": {}}))
    while (await receive(ws))["type"] != "replayed":
        pass
    return ws


def test_a_client_that_does_not_acknowledge_stops_at_its_window_then_catches_up(member, start_asgi_server, client,
                                                                                transactional_db):
    user, team = member
    job = JobFactory(team=team, state="running")
    server = start_asgi_server(**{**LIMITS, "LIVE_BEHIND_SECONDS": "60"})

    cookie = session_cookie(client, user)

    async def scenario():
        ws = await open_socket(server, job, cookie)
        await in_thread(log_points, job, range(400))
        steps, last_seq = [], 0
        try:  # not acknowledging: the server stops once 50 points are outstanding
            while True:
                msg = await receive(ws, timeout=3)
                if msg["type"] == "points":
                    steps += [p[1] for p in msg["points"]]
                    last_seq = msg["seq"]
        except asyncio.TimeoutError:
            pass
        held_back = len(steps)
        await ws.send(json.dumps({"type": "ack", "seq": last_seq}))
        while len(steps) < 400:  # acknowledging now: the rest comes from the database
            msg = await receive(ws)
            if msg["type"] == "points":
                steps += [p[1] for p in msg["points"]]
                await ws.send(json.dumps({"type": "ack", "seq": msg["seq"]}))
        await ws.close()
        return held_back, steps

    held_back, steps = asyncio.run(scenario())
    assert 0 < held_back < 400
    assert steps == list(range(400))  # every point once, in order


def test_a_client_that_stays_behind_is_closed_with_4408(member, start_asgi_server, client, transactional_db):
    user, team = member
    job = JobFactory(team=team, state="running")
    server = start_asgi_server(**LIMITS)

    cookie = session_cookie(client, user)

    async def scenario():
        ws = await open_socket(server, job, cookie)
        await in_thread(log_points, job, range(200))
        while True:
            msg = await receive(ws)
            if msg["type"] == "error":
                await asyncio.wait_for(ws.wait_closed(), 10)
                return msg["code"], ws.close_code

    assert asyncio.run(scenario()) == (4408, 4408)


def closed_after(server, job, cookie, action) -> tuple[dict, int]:
    """Open a live socket, do ``action`` elsewhere, return the error message and close code."""
    async def scenario():
        ws = await open_socket(server, job, cookie)
        await in_thread(action)
        msg = await receive(ws)
        await asyncio.wait_for(ws.wait_closed(), 10)
        return msg, ws.close_code

    return asyncio.run(scenario())


ENDED = ({"type": "error", "code": 4403, "message": "your access to this job ended"}, 4403)


def test_revoking_the_membership_closes_an_open_websocket(member, start_asgi_server, client, transactional_db):
    user, team = member
    job = JobFactory(team=team)
    server = start_asgi_server(**LIMITS)
    cookie = session_cookie(client, user)
    assert closed_after(server, job, cookie, lambda: Membership.objects.filter(user=user, team=team).delete()) == ENDED


def test_logging_out_closes_an_open_websocket(member, start_asgi_server, client, transactional_db):
    user, team = member
    job = JobFactory(team=team)
    server = start_asgi_server(**LIMITS)
    cookie = session_cookie(client, user)
    assert closed_after(server, job, cookie, client.logout) == ENDED
