"""The live channel's trace message, read side, without numpy (the web process stays
light; the worker side that packs it is :func:`opdweb.traces.live_packing.live_messages`).

``{"type": "trace.points", "keys": [...], "counts": [...], "after": [...], "steps": bytes,
"walls": bytes, "values": bytes}``: per key, ``count`` points in strictly increasing step
order, and the last step its sink had written for that key before them (``None``: none
known); the three columns are packed little-endian, steps as int64, wall times and values
as float64.
"""
from __future__ import annotations

import sys
from array import array


def _column(data: bytes, code: str) -> array:
    column = array(code)
    column.frombytes(data)
    if sys.byteorder != "little":
        column.byteswap()
    return column


def unpack_live_message(event: dict):
    """``(key, after, steps, walls, values)`` per key of a live message, the columns as
    ``array``; ``after`` is None where the message does not say."""
    steps = _column(event["steps"], "q")
    walls = _column(event["walls"], "d")
    values = _column(event["values"], "d")
    afters = event.get("after") or [None] * len(event["keys"])
    begin = 0
    for key, count, after in zip(event["keys"], event["counts"], afters, strict=False):
        end = begin + count
        yield key, after, steps[begin:end], walls[begin:end], values[begin:end]
        begin = end
