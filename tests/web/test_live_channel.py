"""The live channel through a real ASGI server, channel layer (Redis) and worker."""
import asyncio
import json

from django.conf import settings
from websockets.asyncio.client import connect

from opdweb.jobs.actions import do_submit_job
from opdweb.jobs.models import Job, JobState
from tests.web.factories import JobFactory
from workers.science.selftest import SELFTEST_KEYS, selftest_value

STEPS = 120


def session_cookie(client, user) -> str:
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


async def follow(url, cookie, after, stop):
    """Connect, resume after ``after``, collect points until ``stop(received)`` is true.
    Returns every point message's points in arrival order and the states seen."""
    points, states = [], []
    async with connect(url, additional_headers={"Cookie": cookie, "Origin": "http://127.0.0.1"}) as ws:
        await ws.send(json.dumps({"type": "resume", "after": after}))
        while not stop(points, states):
            msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=30))
            if msg["type"] == "points":
                points.extend(msg["points"])
            elif msg["type"] == "state":
                states.append(msg["job"]["state"])
            elif msg["type"] == "error":
                raise AssertionError(msg)
    return points, states


def test_a_reconnecting_client_misses_nothing_and_gets_nothing_twice(member, start_worker, asgi_server, client):
    user, team = member
    cookie = session_cookie(client, user)
    start_worker()
    job = do_submit_job(team=team, user=user, kind_name="selftest", config={"steps": STEPS, "sleep_s": 0.02})
    url = f"ws://{asgi_server}/ws/jobs/{job.pk}/"

    # First connection: leave midway, with part of the series.
    first, _ = asyncio.run(follow(url, cookie, {}, lambda pts, st: len(pts) >= STEPS // 2))
    assert 0 < len(first) < 2 * STEPS
    have = {}
    for key, step, _, _ in first:
        have[key] = max(have.get(key, -1), step)

    # Second connection resumes from what it has and follows to the end.
    def done(pts, states):
        return ("succeeded" in states
                and sum(1 for p in pts if p[0] == SELFTEST_KEYS[0]) + have.get(SELFTEST_KEYS[0], -1) + 1 >= STEPS)

    second, states = asyncio.run(follow(url, cookie, have, done))
    assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED

    # Per key: first connection's steps, then the second's, exactly 0..STEPS-1 once each.
    for key in SELFTEST_KEYS:
        steps_first = [p[1] for p in first if p[0] == key]
        steps_second = [p[1] for p in second if p[0] == key]
        assert steps_first == sorted(steps_first)
        combined = [s for s in steps_first if s <= have[key]] + steps_second
        assert combined == list(range(STEPS)), key
        assert all(p[3] == selftest_value(key, p[1]) for p in first + second if p[0] == key)


def test_it_refuses_a_websocket_for_another_teams_job(member, outsider, asgi_server, client):
    user, team = member
    job = JobFactory(team=team)
    cookie = session_cookie(client, outsider)

    async def attempt():
        async with connect(f"ws://{asgi_server}/ws/jobs/{job.pk}/",
                           additional_headers={"Cookie": cookie, "Origin": "http://127.0.0.1"}) as ws:
            msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=10))
            await asyncio.wait_for(ws.wait_closed(), timeout=10)
            return msg, ws.close_code

    msg, code = asyncio.run(attempt())
    assert msg["type"] == "error" and msg["code"] == 4404
    assert "does not exist or belongs to a team you are not in" in msg["message"]
    assert code == 4404


def test_it_refuses_an_anonymous_websocket(member, asgi_server):
    _, team = member
    job = JobFactory(team=team)

    async def attempt():
        async with connect(f"ws://{asgi_server}/ws/jobs/{job.pk}/",
                           additional_headers={"Origin": "http://127.0.0.1"}) as ws:
            msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=10))
            await asyncio.wait_for(ws.wait_closed(), timeout=10)
            return msg, ws.close_code

    msg, code = asyncio.run(attempt())
    assert (msg["code"], code) == (4401, 4401)


def test_a_late_client_gets_a_long_history_in_pages_exactly_once(member, asgi_server, client):
    from opdweb.traces.sink import TraceSink

    user, team = member
    job = JobFactory(team=team, state=JobState.SUCCEEDED)
    sink = TraceSink(job.pk, publish=False)
    for step in range(4_500):
        sink.add(step, {"a": step / 2, "b": -step})
    sink.flush()
    cookie = session_cookie(client, user)

    async def replay():
        got = []
        async with connect(f"ws://{asgi_server}/ws/jobs/{job.pk}/",
                           additional_headers={"Cookie": cookie, "Origin": "http://127.0.0.1"}) as ws:
            await ws.send(json.dumps({"type": "resume", "after": {"a": 999}}))
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=30))
                if msg["type"] == "replayed":
                    return got
                if msg["type"] == "points":
                    got.extend(msg["points"])

    got = asyncio.run(replay())
    assert [(p[1], p[3]) for p in got if p[0] == "a"] == [(s, s / 2) for s in range(1000, 4_500)]
    assert [(p[1], p[3]) for p in got if p[0] == "b"] == [(s, float(-s)) for s in range(4_500)]


def test_a_lost_live_message_is_noticed_by_the_next_one_and_read_from_the_database(member, asgi_server, client):
    """The sink's first two batches are written and their publishes lost (a broker restart,
    a sink fallen behind); the third says which step came before it, so the client that
    never got that step catches up from the database: every step once, in order."""
    from opdweb.jobs import live
    from opdweb.traces.sink import TraceSink

    user, team = member
    job = JobFactory(team=team, state=JobState.RUNNING)
    publishes = [0]

    def lose_the_first_two(messages):
        publishes[0] += 1
        if publishes[0] > 2:
            live.publish(job.pk, messages)

    sink = TraceSink(job.pk, publish=lose_the_first_two)
    for step in range(10):
        sink.add(step, {"a": step / 2})
    sink.flush()
    cookie = session_cookie(client, user)

    async def watch():
        got = []
        async with connect(f"ws://{asgi_server}/ws/jobs/{job.pk}/",
                           additional_headers={"Cookie": cookie, "Origin": "http://127.0.0.1"}) as ws:
            await ws.send(json.dumps({"type": "resume", "after": {}}))
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=30))
                if msg["type"] == "points":
                    got.extend(msg["points"])
                    await ws.send(json.dumps({"type": "ack", "seq": msg["seq"]}))
                elif msg["type"] == "replayed":
                    def more():
                        for first, last in ((10, 20), (20, 25)):  # lost, then published
                            for step in range(first, last):
                                sink.add(step, {"a": step / 2})
                            sink.flush()
                    await asyncio.to_thread(more)
                if got and got[-1][1] == 24:
                    return got

    try:
        got = asyncio.run(watch())
    finally:
        sink.close()
    assert [(p[1], p[3]) for p in got] == [(s, s / 2) for s in range(25)]
    assert publishes[0] == 3


async def follow_log(url, cookie, log_after, stop):
    """Connect asking for the log after ``log_after``; collect ``(entry, the job's progress
    when it arrived)`` until ``stop(entries, states)``."""
    entries, states, progress = [], [], 0.0
    async with connect(url, additional_headers={"Cookie": cookie, "Origin": "http://127.0.0.1"}) as ws:
        await ws.send(json.dumps({"type": "resume", "after": {}, "log_after": log_after}))
        while not stop(entries, states):
            msg = json.loads(await asyncio.wait_for(ws.recv(), timeout=30))
            if msg["type"] == "log":
                entries.extend((entry, progress) for entry in msg["entries"])
            elif msg["type"] == "state":
                states.append(msg["job"]["state"])
                progress = msg["job"]["progress"]
            elif msg["type"] == "error":
                raise AssertionError(msg)
    return entries, states


def test_the_log_streams_live_each_line_once_and_a_late_client_resumes_after_its_last_line(
        member, start_worker, asgi_server, client):
    user, team = member
    cookie = session_cookie(client, user)
    start_worker()
    job = do_submit_job(team=team, user=user, kind_name="selftest",
                        config={"steps": 60, "sleep_s": 0.05, "log_every": 10})
    url = f"ws://{asgi_server}/ws/jobs/{job.pk}/"

    def finished(entries, states):
        return "succeeded" in states and any(e[3].endswith(f"job {job.pk} succeeded") for e, _ in entries)

    entries, states = asyncio.run(follow_log(url, cookie, 0, finished))
    messages = [e[3] for e, _ in entries]
    step_lines = [m for m in messages if m.startswith("workers.science.selftest: step")]
    assert step_lines == [f"workers.science.selftest: step {s}" for s in range(0, 60, 10)]
    ids = [e[0] for e, _ in entries]
    assert ids == sorted(set(ids))  # each line once, in order
    # The lines came while the job ran (a 3 s job, written every second), not at its end.
    assert entries[0][1] < 0.8 and "succeeded" in states
    stored = list(job.log_entries.order_by("pk").values_list("pk", "level", "message"))
    assert [(e[0], e[2], e[3]) for e, _ in entries] == stored

    # A client that has the lines up to the third gets exactly the rest.
    have = stored[2][0]
    rest, _ = asyncio.run(follow_log(url, cookie, have, lambda got, st: len(got) >= len(stored) - 3))
    assert [e[0] for e, _ in rest] == [pk for pk, _, _ in stored[3:]]


def test_a_client_that_does_not_ask_for_the_log_gets_none_and_a_bad_log_after_is_refused(member, asgi_server, client):
    user, team = member
    job = JobFactory(team=team, state=JobState.SUCCEEDED)
    job.log_entries.create(created_at=job.created_at, level="INFO", message="one line")
    cookie = session_cookie(client, user)

    async def exchange(resume):
        got = []
        async with connect(f"ws://{asgi_server}/ws/jobs/{job.pk}/",
                           additional_headers={"Cookie": cookie, "Origin": "http://127.0.0.1"}) as ws:
            await ws.send(json.dumps(resume))
            while not got or got[-1]["type"] not in ("replayed", "error"):
                got.append(json.loads(await asyncio.wait_for(ws.recv(), timeout=10)))
        return [m["type"] for m in got], got[-1]

    types, _ = asyncio.run(exchange({"type": "resume", "after": {}}))
    assert "log" not in types
    types, _ = asyncio.run(exchange({"type": "resume", "after": {}, "log_after": 0}))
    assert types.count("log") == 1
    types, last = asyncio.run(exchange({"type": "resume", "after": {}, "log_after": "all"}))
    assert last["code"] == 4400 and "log_after" in last["message"]
