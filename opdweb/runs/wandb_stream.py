"""W&B's file stream (``POST <base>/files/<entity>/<project>/<run>/file_stream``), read.

Each request carries runs of lines of the run's files, each at its offset (its first line's
number in that file): ``wandb-history.jsonl`` (one JSON object per ``wandb.log`` step:
``_step``, ``_runtime``, ``_timestamp`` and the logged values), ``wandb-events.jsonl``
(system metrics), ``output.log`` (console lines) and ``wandb-summary.json`` (the whole
summary, one line); then ``complete`` and ``exitcode`` when the run ends.  A client that
retries sends the same lines at the same offsets, so a line is known by its number
(:meth:`Lines.after`), and a point by its key and step (:mod:`.points`).

A history value becomes a point when it is a number (int or float, NaN and infinities
included; booleans, strings and media are not series); nested dictionaries are keys joined
with ``.`` (as W&B's charts name them).  A value that cannot be a point (a key longer than
the trace store keeps, a key under the product's own prefix, a step out of range) is left
out and named in the job's log: refusing the request would stop the client's whole stream.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from opdweb.runs.metric_map import RESERVED_PREFIX
from opdweb.runs.mlflow_requests import MAX_METRIC_KEY_LENGTH
from opdweb.runs.points import KeyPoints
from opdweb.traces.models import MAX_STEP

HISTORY = "wandb-history.jsonl"
EVENTS = "wandb-events.jsonl"
OUTPUT = "output.log"
SUMMARY = "wandb-summary.json"
#: Offsets and line counts past this are refused (a client counts lines from 0).
MAX_OFFSET = 2**31 - 1


class BadStream(ValueError):
    """A request that is not W&B's file-stream JSON (answered 400, saying why)."""


@dataclass(frozen=True)
class Lines:
    offset: int = 0
    lines: list[str] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.offset + len(self.lines)

    def after(self, count: int) -> Lines:
        """The lines numbered ``count`` and later (those before were received already)."""
        skip = max(0, count - self.offset)
        return Lines(self.offset + skip, self.lines[skip:]) if skip else self


@dataclass
class StreamUpdate:
    history: Lines
    events: Lines
    output: Lines
    summary: dict | None
    complete: bool
    exit_code: int | None
    dropped: list[str] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        """A heartbeat (or the end of a run already ended): nothing to write."""
        return not (self.history.lines or self.events.lines or self.output.lines or self.summary is not None)

    def series(self, history: Lines) -> list[KeyPoints]:
        """The points of ``history``'s lines, per key; what cannot be a point goes to :attr:`dropped`."""
        by_key: dict[str, KeyPoints] = {}
        for number, line in enumerate(history.lines, start=history.offset):
            row = _object(line, f"{HISTORY} line {number}")
            step = row.get("_step", number)
            if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
                self.dropped.append(f"{HISTORY} line {number}: _step {str(step)[:40]!r} is not a step (0 to "
                                    f"{MAX_STEP})")
                continue
            stamp = row.get("_timestamp")
            ms = int(stamp * 1000) if _number(stamp) and math.isfinite(stamp) and 0 <= stamp < 1e11 else 0
            for key, value in _flat(row):
                if key.startswith("_") or not _number(value):
                    continue
                if len(key) > MAX_METRIC_KEY_LENGTH or key.startswith(RESERVED_PREFIX):
                    why = (f"longer than {MAX_METRIC_KEY_LENGTH} characters" if len(key) > MAX_METRIC_KEY_LENGTH
                           else f"under the product's own prefix {RESERVED_PREFIX!r}")
                    self.dropped.append(f"key {key[:60]!r}{'...' if len(key) > 60 else ''} at step {step}: {why}")
                    continue
                points = by_key.get(key)
                if points is None:
                    points = by_key[key] = KeyPoints(key, [], [], [])
                points.steps.append(step)
                points.values.append(float(value))
                points.timestamps.append(ms)
        return list(by_key.values())


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and (
        not isinstance(value, int) or abs(value) < 2**1023)


def _flat(row: dict, prefix: str = ""):
    for key, value in row.items():
        if isinstance(value, dict) and "_type" not in value:
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield prefix + key, value


def _object(line: str, where: str) -> dict:
    try:
        row = json.loads(line)
    except ValueError:
        raise BadStream(f"{where} is not JSON") from None
    if not isinstance(row, dict):
        raise BadStream(f"{where} is not a JSON object")
    return row


def _lines(files: dict, name: str) -> Lines:
    chunk = files.get(name)
    if chunk is None:
        return Lines()
    if not isinstance(chunk, dict):
        raise BadStream(f"files.{name} must be {{'offset': N, 'content': [lines]}}")
    offset, content = chunk.get("offset", 0), chunk.get("content", [])
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
        raise BadStream(f"files.{name}.offset must be a line number")
    if not isinstance(content, list) or not all(isinstance(line, str) for line in content):
        raise BadStream(f"files.{name}.content must be a list of strings")
    if offset + len(content) > MAX_OFFSET:
        raise BadStream(f"files.{name} goes past line {MAX_OFFSET}")
    return Lines(offset, content)


def parse(body: bytes) -> StreamUpdate:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadStream("the file stream's body is not JSON") from None
    if not isinstance(data, dict):
        raise BadStream("the file stream's body must be a JSON object")
    files = data.get("files") or {}
    if not isinstance(files, dict):
        raise BadStream("'files' must be an object of file names")
    summary_lines = _lines(files, SUMMARY).lines
    summary = _object(summary_lines[-1], SUMMARY) if summary_lines else None
    exit_code = data.get("exitcode")
    if exit_code is not None and (isinstance(exit_code, bool) or not isinstance(exit_code, int)):
        raise BadStream("'exitcode' must be an integer")
    update = StreamUpdate(history=_lines(files, HISTORY), events=_lines(files, EVENTS), output=_lines(files, OUTPUT),
                          summary=summary, complete=data.get("complete") is True, exit_code=exit_code)
    for number, line in enumerate(update.history.lines, start=update.history.offset):
        _object(line, f"{HISTORY} line {number}")  # a bad line refuses the request before anything is written
    return update
