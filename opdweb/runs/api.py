"""A run's points over the API, held per key: what the native client sends.

``POST /api/runs/<run_id>/points`` takes up to :data:`MAX_POINTS_PER_REQUEST` points of an
open run (one made by ``runs/create``, MLflow's or the native client's) as one entry per
key with parallel lists, the shape the trace store writes, so a batch is read and checked
by pydantic straight from its JSON text and no point is handled alone on the way in.  The
points go where MLflow's ``runs/log-batch`` puts them, with the same rules (each point
once, the first value of a step stays, the linked run's multiple derived and watched:
:mod:`.points`, :mod:`.linking`, :mod:`.watch`); a batch with one bad entry is refused
whole and writes nothing.  It takes an API token of the run's team that may write.
"""
from __future__ import annotations

import json
import time
from typing import Annotated, Literal

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from opdweb.api import Routes
from opdweb.refusals import Refused
from opdweb.runs import actions
from opdweb.runs.mlflow_requests import MAX_METRIC_KEY_LENGTH, NON_FINITE
from opdweb.runs.points import KeyPoints
from opdweb.tokens.authentication import request_token
from opdweb.traces.models import MAX_STEP

MAX_POINTS_PER_REQUEST = 100_000
MAX_KEYS_PER_REQUEST = 1_000

routes = Routes()

Step = Annotated[int, Field(strict=True, ge=0, le=MAX_STEP)]
Value = Annotated[float, Field(strict=True, allow_inf_nan=False)] | Literal["NaN", "Infinity", "-Infinity"]
Timestamp = Annotated[int, Field(strict=True, ge=-(2**63), lt=2**63)]


class SeriesIn(BaseModel):
    """One key's points: ``steps[i]`` has ``values[i]``, logged at ``timestamps[i]``."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1, max_length=MAX_METRIC_KEY_LENGTH, pattern=r"^[^\x00]*$")
    steps: list[Step] = Field(description="integers from 0 to 2**53 - 1; one value per key and step")
    values: list[Value] = Field(description='numbers; not finite ones as "NaN", "Infinity", "-Infinity"')
    timestamps: list[Timestamp] | None = Field(None, description="unix milliseconds; default: when received")

    @field_validator("values", mode="wrap")
    @classmethod
    def numbers(cls, values, handler):
        """One message for a value that is not a number (the union would give two)."""
        try:
            return handler(values)
        except ValidationError as exc:
            bad = exc.errors()[0]
            if not bad["loc"]:  # not a list at all
                raise ValueError(f"values must be a list of numbers; {bad['msg'][0].lower()}{bad['msg'][1:]}") from None
            raise ValueError(f"values[{bad['loc'][0]}] must be a finite number or \"NaN\", \"Infinity\", "
                             f"\"-Infinity\"; got {json.dumps(bad['input'], default=repr)[:40]}") from None

    @model_validator(mode="after")
    def parallel(self) -> SeriesIn:
        n = len(self.steps)
        if len(self.values) != n or (self.timestamps is not None and len(self.timestamps) != n):
            got = f"{n} steps, {len(self.values)} values" + (
                f", {len(self.timestamps)} timestamps" if self.timestamps is not None else "")
            raise ValueError(f"{self.key!r}: steps, values and timestamps are parallel lists; got {got}")
        return self


class PointsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    series: list[SeriesIn] = Field(max_length=MAX_KEYS_PER_REQUEST, description="one entry per key")

    @model_validator(mode="after")
    def within_limits(self) -> PointsIn:
        total = sum(len(s.steps) for s in self.series)
        if total > MAX_POINTS_PER_REQUEST:
            raise ValueError(f"a request holds at most {MAX_POINTS_PER_REQUEST:,} points; this one has {total:,}")
        keys = [s.key for s in self.series]
        if len(set(keys)) != len(keys):
            twice = next(k for i, k in enumerate(keys) if k in keys[:i])
            raise ValueError(f"key {twice!r} appears twice; send one entry per key")
        return self


class PointsOut(BaseModel):
    received: int = Field(description="points in the request")
    written: int = Field(description="points stored by it (a resent batch writes none)")


@routes.route("POST", "runs/<str:run_id>/points", summary="Log points of an open run, held per key",
              body=PointsIn, response=PointsOut, errors=(400, 401, 403, 404, 413, 429),
              max_body_bytes=settings.RUN_POINTS_MAX_REQUEST_BYTES)
def log_points(request, run_id: str, body: PointsIn):
    token = request_token(request)
    if token is None:
        raise Refused("a run's points are logged with an API token of its team (make one on /tokens/)", status=403)
    now_ms = int(time.time() * 1000)
    series = [
        KeyPoints(s.key, s.steps, [NON_FINITE[v] if isinstance(v, str) else v for v in s.values],
                  s.timestamps if s.timestamps is not None else [now_ms] * len(s.steps))
        for s in body.series
    ]
    written = actions.do_log_points(token, run_id, series)
    return PointsOut(received=sum(len(s.steps) for s in series), written=written)
