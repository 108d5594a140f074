"""The live channel of one job.

Protocol (JSON):
- client -> ``{"type": "resume", "after": {"<key>": <last step it has>, ...}}`` once,
  right after connecting (``{}`` for a client that has nothing yet);
- server -> ``{"type": "points", "points": [[key, step, wall_time, value], ...]}``, first
  the rest from the database, then ``{"type": "replayed"}``, then live increments;
- server -> ``{"type": "state", "job": {...}}`` whenever the job's state or progress moves;
- server -> ``{"type": "error", "code": 4xx, "message": ...}`` then close, on refusal.

The consumer joins the job's group before reading the database and drops any live point
at or below the last step it has sent for its key, so a reconnecting client misses
nothing and receives nothing twice.  Live increments arrive from the trace sink as packed
columns per key (see :mod:`opdweb.traces.live_format`); the consumer keeps the
steps it has not sent and writes them as JSON, at most ``REPLAY_CHUNK`` points per message.
"""
from __future__ import annotations

from bisect import bisect_right

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from opdweb.jobs.live import job_group, state_payload
from opdweb.jobs.models import Job
from opdweb.teams.access import has_role
from opdweb.teams.models import Role
from opdweb.traces.queries import points_after, series_of
from opdweb.traces.live_format import unpack_live_message

REPLAY_CHUNK = 2000


class JobLiveConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        self.job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        self.sent: dict[str, int] = {}
        self.resumed = False
        self.pending: list[dict] = []
        user = self.scope.get("user")
        await self.accept()
        if user is None or not user.is_authenticated:
            return await self.refuse(4401, "log in to follow a job")
        job = await self.load_job(user)
        if job is None:
            return await self.refuse(4404, f"job #{self.job_id} does not exist or belongs to a team you are not in")
        self.group = job_group(self.job_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.send_json({"type": "state", "job": state_payload(job)})

    async def refuse(self, code: int, message: str):
        self.group = None
        await self.send_json({"type": "error", "code": code, "message": message})
        await self.close(code=code)

    async def disconnect(self, code):
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    @database_sync_to_async
    def load_job(self, user):
        job = Job.objects.filter(pk=self.job_id).first()
        if job is None or not has_role(user, job.team_id, Role.VIEWER):
            return None
        return job

    async def receive_json(self, content, **kwargs):
        if not getattr(self, "group", None):
            return
        if content.get("type") != "resume" or self.resumed:
            return await self.send_json({"type": "error", "code": 4400, "message": "send one {type: resume, after: {key: step}}"})
        after = content.get("after") or {}
        if not isinstance(after, dict) or not all(isinstance(v, int) for v in after.values()):
            return await self.send_json({"type": "error", "code": 4400, "message": "after must map keys to integer steps"})
        self.sent = {str(k): v for k, v in after.items()}
        for series_id, key in await database_sync_to_async(series_of)(self.job_id):
            while True:
                rows = await database_sync_to_async(points_after)(series_id, self.sent.get(key, -1), REPLAY_CHUNK)
                if not rows:
                    break
                await self.send_points([[key, step, wall, value] for step, wall, value in rows])
        self.resumed = True
        pending, self.pending = self.pending, []
        for event in pending:
            await self.send_live(event)
        await self.send_json({"type": "replayed"})

    async def send_points(self, points):
        fresh = []
        for point in points:
            key, step = point[0], point[1]
            if step > self.sent.get(key, -1):
                fresh.append(point)
                self.sent[key] = step
        if fresh:
            await self.send_json({"type": "points", "points": fresh})

    async def send_live(self, event):
        """Forward one live message: per key, only the steps after the last one sent."""
        if "points" in event:  # the list form a sink of an earlier release may still send
            return await self.send_points(event["points"])
        points = []
        for key, steps, walls, values in unpack_live_message(event):
            if not len(steps):
                continue
            last_sent = self.sent.get(key, -1)
            if steps[-1] <= last_sent:
                continue
            start = bisect_right(steps, last_sent)  # steps are strictly increasing
            self.sent[key] = steps[-1]
            fresh = zip(steps[start:].tolist(), walls[start:].tolist(), values[start:].tolist())
            points.extend([key, s, w, v] for s, w, v in fresh)
        for i in range(0, len(points), REPLAY_CHUNK):
            await self.send_json({"type": "points", "points": points[i : i + REPLAY_CHUNK]})

    # Group messages (type "trace.points" -> trace_points, "job.state" -> job_state).
    async def trace_points(self, event):
        if not self.resumed:
            self.pending.append(event)
            return
        await self.send_live(event)

    async def job_state(self, event):
        await self.send_json({"type": "state", "job": event["job"]})
