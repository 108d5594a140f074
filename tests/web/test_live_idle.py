"""An idle live client stays connected: nothing happens on its job for a minute, then the
next state change still reaches it over the same websocket."""
import asyncio
import json
import time

import pytest
from django.db import connection
from websockets.asyncio.client import connect

from opdweb.jobs.actions import do_cancel_job
from tests.web.factories import JobFactory
from tests.web.test_live_channel import session_cookie

pytestmark = pytest.mark.slow

IDLE_SECONDS = 60


def cancel(job):
    """From a thread of its own, which must close the connection it opened."""
    try:
        do_cancel_job(job)
    finally:
        connection.close()


def test_an_idle_client_stays_connected_for_a_minute(member, asgi_server, client):
    user, team = member
    job = JobFactory(team=team)
    cookie = session_cookie(client, user)

    async def follow():
        url = f"ws://{asgi_server}/ws/jobs/{job.pk}/"
        async with connect(url, additional_headers={"Cookie": cookie, "Origin": "http://127.0.0.1"}) as ws:
            await ws.send(json.dumps({"type": "resume", "after": {}}))
            deadline = time.monotonic() + IDLE_SECONDS
            while (left := deadline - time.monotonic()) > 0:
                try:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=left))
                except asyncio.TimeoutError:
                    break
                assert msg["type"] in ("points", "replayed", "state"), msg
            await asyncio.to_thread(cancel, job)
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=10))
                if msg["type"] == "state":
                    return msg["job"]["state"]

    assert asyncio.run(follow()) == "cancelled"
