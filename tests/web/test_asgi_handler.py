"""The ASGI entry point runs a request's middleware and view as one synchronous call:
the same answers as Django's own handler, with far fewer thread switches."""
import asyncio
import gzip

import asgiref.sync
import pytest
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_finished
from django.db import connections

from opdweb.asgi import OneHopHandler
from opdweb.traces.queries import downsample
from opdweb.traces.sink import TraceSink
from tests.web.factories import JobFactory, MembershipFactory

pytestmark = pytest.mark.django_db(transaction=True)


def get(handler, path: str, query: str, cookie: str) -> tuple[int, dict, bytes]:
    """One GET through ``handler`` as daphne calls it; (status, headers, body)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), (b"cookie", cookie.encode()), (b"accept-encoding", b"gzip")],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}
    sent = []

    async def run():
        asked = asyncio.Event()

        async def receive():
            if not asked.is_set():
                asked.set()
                return {"type": "http.request", "body": b"", "more_body": False}
            await asyncio.Event().wait()  # no disconnect: the client waits for its answer

        async def send(message):
            sent.append(message)

        await handler(scope, receive, send)

    asyncio.run(run())
    start = sent[0]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], {k.decode().lower(): v.decode() for k, v in start["headers"]}, body


def test_a_chart_read_answers_as_djangos_handler_does_with_fewer_thread_switches(client, monkeypatch):
    job = JobFactory()
    sink = TraceSink(job.pk, publish=False)
    sink.add_many("loss", list(range(3000)), [float(s % 23) for s in range(3000)], [1.7e9] * 3000)
    sink.close()
    client.force_login(MembershipFactory(team=job.team).user)
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    path, query = f"/api/jobs/{job.pk}/series/downsampled", "key=loss&buckets=100&start=10&end=2500"

    switches = []
    real_call = asgiref.sync.SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        switches.append(self.func)
        return await real_call(self, *args, **kwargs)

    monkeypatch.setattr(asgiref.sync.SyncToAsync, "__call__", counted)

    def close_connections(**kwargs):  # the request's thread ends: its connection with it, as the pool does
        connections.close_all()

    request_finished.connect(close_connections)
    answers = {}
    for name, handler in (("django", ASGIHandler()), ("one hop", OneHopHandler())):
        switches.clear()
        status, headers, body = get(handler, path, query, cookie)
        answers[name] = (status, headers["content-type"], headers.get("content-encoding"), gzip.decompress(body))
        answers[name + " switches"] = len(switches)
    request_finished.disconnect(close_connections)
    series = job.series.get(key="loss")
    assert answers["one hop"] == answers["django"] == (
        200, "application/json", "gzip", downsample(series, 100, 10, 2500).json().encode())
    # Django's handler adapts each middleware method (15 switches at Django 5.2); this one
    # the whole chain, once, beside the request signals and closing the answer (3).
    assert answers["one hop switches"] <= 3 and answers["django switches"] >= 3 + 8, answers
