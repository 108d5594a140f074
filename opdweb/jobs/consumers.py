"""The live channel of one job.

Protocol (JSON):
- client -> ``{"type": "resume", "after": {"<key>": <last step it has>, ...}}`` once,
  right after connecting (``{}`` for a client that has nothing yet);
- server -> ``{"type": "points", "seq": n, "points": [[key, step, wall_time, value], ...]}``,
  first the rest from the database, then ``{"type": "replayed"}``, then live increments;
- client -> ``{"type": "ack", "seq": n}`` once it has taken in points message ``n``;
- server -> ``{"type": "state", "job": {...}}`` whenever the job's state or progress moves;
- the job's log, for a client that asks for it with ``"log_after": <last entry id it has>``
  in its ``resume`` (0 for none): server -> ``{"type": "log", "entries": [[id, time, level,
  message], ...]}``, first the entries after that id from the database (the newest
  ``LOG_REPLAY_LINES`` of them), then each batch the worker writes, every entry once;
- server -> ``{"type": "error", "code": 4xxx, "message": ...}`` then close: 4401 / 4404 on
  refusal, 4403 when the user's access ends while connected, 4408 when the client fell
  too far behind (reconnect and resume: the database has everything).

The consumer joins the job's group before reading the database and drops any live point
at or below the last step it has sent for its key, so a reconnecting client misses
nothing and receives nothing twice.  Live increments arrive from the trace sink as packed
columns per key (see :mod:`opdweb.traces.live_format`); the sink publishes a batch only
after it is committed, so increments that arrive before the client's ``resume`` are in the
database replay already and are dropped, not held.  Each increment names, per key, the
step its sink wrote before it: one that follows a step this client never got means a
message was lost on the way (a broker restart, a sink fallen behind), and the consumer
reads the database instead of leaving a hole.

Memory per connection is bounded: at most ``LIVE_WINDOW_POINTS`` points may be sent and
not yet acknowledged.  Past that, live increments are not sent (the client is behind);
when its acks bring it back under half the window, it catches up from the database; if it
stays behind ``LIVE_BEHIND_SECONDS``, it is closed with 4408.  Access is checked again every
``LIVE_ACCESS_RECHECK_SECONDS``: a revoked membership or an ended session closes it with 4403.
"""
from __future__ import annotations

import asyncio
import time
from bisect import bisect_right
from collections import deque

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from opdweb.jobs.live import job_group, log_line, state_payload
from opdweb.jobs.models import Job, JobLogEntry
from opdweb.teams.access import has_role
from opdweb.teams.models import Role
from opdweb.traces.live_format import unpack_live_message
from opdweb.traces.queries import points_after, series_of

REPLAY_CHUNK = 2000
LOG_REPLAY_LINES = 1000


class JobLiveConsumer(AsyncJsonWebsocketConsumer):
    async def dispatch(self, message):
        """Hand each message to its handler on the event loop.  Channels' own dispatch first
        closes stale database connections through the one thread that runs sync code, for
        every message: with a few jobs streaming to a few clients that is thousands of
        thread hops a second, queued behind each other (the live latency was seconds).
        The handlers here reach the database only through ``database_sync_to_async``,
        which closes stale connections itself, in its thread."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def connect(self):
        self.job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        self.group = None
        self.sent: dict[str, int] = {}
        self.resumed = False
        self.replayed = False
        self.catching_up = False
        self.missed = False
        self.replay_queue: deque | None = None
        self.seq = 0
        self.log_sent: int | None = None  # id of the last log entry sent; None: the client did not ask
        self.unacked: deque[tuple[int, int]] = deque()  # (seq, points) sent and not yet acknowledged
        self.unacked_points = 0
        self.behind_since: float | None = None
        self.watch: asyncio.Task | None = None
        user = self.scope.get("user")
        await self.accept()
        if user is None or not user.is_authenticated:
            return await self.refuse(4401, "log in to follow a job")
        job = await self.load_job(user)
        if job is None:
            return await self.refuse(4404, f"job #{self.job_id} does not exist or belongs to a team you are not in")
        self.team_id = job.team_id
        self.group = job_group(self.job_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.send_json({"type": "state", "job": state_payload(job)})
        self.watch = asyncio.create_task(self.watch_connection())

    async def refuse(self, code: int, message: str):
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        self.group = None
        await self.send_json({"type": "error", "code": code, "message": message})
        await self.close(code=code)

    async def disconnect(self, code):
        if self.watch is not None and self.watch is not asyncio.current_task():
            self.watch.cancel()
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            self.group = None

    @database_sync_to_async
    def load_job(self, user):
        job = Job.objects.filter(pk=self.job_id).first()
        if job is None or not has_role(user, job.team_id, Role.VIEWER):
            return None
        return job

    @database_sync_to_async
    def still_allowed(self) -> bool:
        """The membership still holds and the session has not ended (logout, expiry)."""
        session = self.scope.get("session")
        if session is None or session.session_key is None or not session.exists(session.session_key):
            return False
        return has_role(self.scope["user"], self.team_id, Role.VIEWER)

    async def watch_connection(self):
        """Every few seconds: close a client whose access ended, or that stayed behind too long."""
        try:
            while self.group:
                await asyncio.sleep(settings.LIVE_ACCESS_RECHECK_SECONDS)
                if not await self.still_allowed():
                    return await self.refuse(4403, "your access to this job ended")
                if (self.behind_since is not None
                        and time.monotonic() - self.behind_since > settings.LIVE_BEHIND_SECONDS):
                    return await self.refuse(4408, "fell too far behind the live points; reconnect to resume")
        except asyncio.CancelledError:
            pass

    async def receive_json(self, content, **kwargs):
        if not self.group:
            return
        if content.get("type") == "ack":
            return await self.acknowledge(content.get("seq"))
        if content.get("type") != "resume" or self.resumed:
            return await self.send_json({"type": "error", "code": 4400,
                                         "message": "send one {type: resume, after: {key: step}}"})
        after = content.get("after") or {}
        if not isinstance(after, dict) or not all(isinstance(v, int) for v in after.values()):
            return await self.send_json({"type": "error", "code": 4400,
                                         "message": "after must map keys to integer steps"})
        log_after = content.get("log_after")
        if log_after is not None and (not isinstance(log_after, int) or isinstance(log_after, bool)):
            return await self.send_json({"type": "error", "code": 4400, "message": "log_after must be an integer id"})
        self.sent = {str(k): v for k, v in after.items()}
        self.resumed = True
        if log_after is not None:
            self.log_sent = log_after
            await self.send_log(await self.log_after(log_after))
        await self.catch_up()

    @database_sync_to_async
    def log_after(self, entry_id: int) -> list[list]:
        newest = JobLogEntry.objects.filter(job_id=self.job_id, pk__gt=entry_id).order_by("-pk")[:LOG_REPLAY_LINES]
        return [log_line(e) for e in reversed(newest)]

    async def send_log(self, entries: list[list]):
        fresh = [e for e in entries if e[0] > self.log_sent]
        if fresh:
            self.log_sent = fresh[-1][0]
            await self.send_json({"type": "log", "entries": fresh})

    async def catch_up(self):
        """Send what the database has after ``sent``, a chunk at a time while the window
        has room; the client's acks continue it.  Live increments that arrive meanwhile are
        not held: they only mark that another pass over the series is needed once this one
        ends (the database has their points).  Done when a pass finds nothing missed."""
        self.catching_up = True
        while True:
            if self.replay_queue is None:
                self.replay_queue = deque(await database_sync_to_async(series_of)(self.job_id))
                self.missed = False
            while self.replay_queue:
                room = settings.LIVE_WINDOW_POINTS - self.unacked_points
                if room <= 0:
                    self.behind_since = self.behind_since or time.monotonic()
                    return  # the client's acks continue the catch-up
                series_id, key = self.replay_queue[0]
                rows = await database_sync_to_async(points_after)(series_id, self.sent.get(key, -1),
                                                                  min(room, REPLAY_CHUNK))
                if rows:
                    await self.send_points([[key, step, wall, value] for step, wall, value in rows])
                else:
                    self.replay_queue.popleft()
            self.replay_queue = None
            if not self.missed:
                break
        self.catching_up = False
        self.behind_since = None
        if not self.replayed:
            self.replayed = True
            await self.send_json({"type": "replayed"})

    async def acknowledge(self, seq):
        if not isinstance(seq, int):
            return
        while self.unacked and self.unacked[0][0] <= seq:
            self.unacked_points -= self.unacked.popleft()[1]
        if self.catching_up:
            await self.catch_up()

    async def send_points(self, points):
        """Send the points after what was sent per key, at most REPLAY_CHUNK a message."""
        fresh = []
        for point in points:
            key, step = point[0], point[1]
            if step > self.sent.get(key, -1):
                fresh.append(point)
                self.sent[key] = step
        for i in range(0, len(fresh), REPLAY_CHUNK):
            chunk = fresh[i : i + REPLAY_CHUNK]
            self.seq += 1
            self.unacked.append((self.seq, len(chunk)))
            self.unacked_points += len(chunk)
            await self.send_json({"type": "points", "seq": self.seq, "points": chunk})

    # Group messages (type "trace.points" -> trace_points, "job.state" -> job_state, "job.log" -> job_log,
    # "run.alert" -> run_alert).
    async def trace_points(self, event):
        """Forward one live message: per key, only the steps after the last one sent.
        Before ``resume`` nothing is sent or held (the replay reads the database); while
        catching up, when the message would overfill the window, or when it follows a step
        this client never got (a message lost on the way: a broker restart, a sink that
        fell behind), it only marks that the catch-up must read the database again."""
        if not self.resumed:
            return
        if self.catching_up:
            self.missed = True
            return
        points = []
        for key, after, steps, walls, values in unpack_live_message(event):
            last_sent = self.sent.get(key, -1)
            if after is not None and after > last_sent:
                self.missed = True
                return await self.catch_up()
            if not len(steps) or steps[-1] <= last_sent:
                continue
            start = bisect_right(steps, last_sent)  # steps are strictly increasing
            fresh = zip(steps[start:].tolist(), walls[start:].tolist(), values[start:].tolist(), strict=False)
            points.extend([key, s, w, v] for s, w, v in fresh)
        if self.unacked_points + len(points) > settings.LIVE_WINDOW_POINTS:
            self.missed = True
            return await self.catch_up()
        await self.send_points(points)

    async def job_state(self, event):
        await self.send_json({"type": "state", "job": event["job"]})

    async def run_alert(self, event):
        """An alert raised on the run as its points arrived; the page adds it to its list
        (a client still replaying gets it with the page's next load, from the database)."""
        if self.resumed:
            await self.send_json({"type": "alert", "alert": event["alert"]})

    async def job_log(self, event):
        """Forward the log entries the worker just wrote, to a client that asked for the log
        and once its replay from the database is done (this runs after it: one message at a
        time), skipping any the replay already sent."""
        if self.resumed and self.log_sent is not None:
            await self.send_log(event["entries"])
