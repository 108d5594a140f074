"""The live channel's trace message, packing side (the worker's; the web process reads it
without numpy: :mod:`opdweb.traces.live_format`).

One message per flush (split past ``LIVE_MESSAGE_POINTS``) carrying, per
key, its points in step order as packed little-endian columns: the keys, their point
counts, and the steps (int64), wall times and values (float64) as bytes (the format and
its numpy-free reader: :mod:`opdweb.traces.live_format`).  Encoding is a
``tobytes`` per column, no Python object per point; the consumer unpacks the columns,
drops what its client already has, and writes the JSON.  Publishing happens after the
commit, so a consumer that replays from the database after joining the group misses
nothing.
"""
from __future__ import annotations

import numpy as np

from opdweb.traces.pending import Arrays

# A live message carries at most this many points (about 24 bytes each on the channel
# layer); a larger flush is split into several messages.
LIVE_MESSAGE_POINTS = 20_000


def live_messages(arrays: Arrays, after: dict[str, int] | None = None) -> list[dict]:
    """The live messages for one flush: per key, its points in strictly increasing step
    order (a replayed step keeps its first value, as the table does), packed as columns,
    and the step the sink had written last for that key before them (``after``: None
    where it had written none), so a consumer that did not get that step knows it missed
    a message and reads the database instead."""
    after = after or {}
    keys, counts, steps, walls, values = [], [], [], [], []
    for key, (s, w, v) in arrays.items():
        if len(s) > 1 and not bool((s[1:] > s[:-1]).all()):
            s, first = np.unique(s, return_index=True)
            w, v = w[first], v[first]
        keys.append(key)
        counts.append(len(s))
        steps.append(s)
        walls.append(w)
        values.append(v)
    steps_all = np.concatenate(steps).astype("<i8", copy=False)
    walls_all = np.concatenate(walls).astype("<f8", copy=False)
    values_all = np.concatenate(values).astype("<f8", copy=False)
    messages, begin = [], 0
    message = _new_live_message()
    for key, count in zip(keys, counts, strict=True):
        done, previous = 0, after.get(key)
        while done < count:
            take = min(count - done, LIVE_MESSAGE_POINTS - message["n"])
            message["keys"].append(key)
            message["counts"].append(take)
            message["after"].append(previous)
            message["n"] += take
            done += take
            previous = int(steps_all[begin + message["n"] - 1])  # a split key goes on after its own piece
            if message["n"] == LIVE_MESSAGE_POINTS:
                messages.append(_pack(message, steps_all, walls_all, values_all, begin))
                begin += message["n"]
                message = _new_live_message()
    if message["n"]:
        messages.append(_pack(message, steps_all, walls_all, values_all, begin))
    return messages


def _new_live_message() -> dict:
    return {"keys": [], "counts": [], "after": [], "n": 0}


def _pack(message: dict, steps, walls, values, begin: int) -> dict:
    end = begin + message["n"]
    return {
        "type": "trace.points",
        "keys": message["keys"],
        "counts": message["counts"],
        "after": message["after"],
        "steps": steps[begin:end].tobytes(),
        "walls": walls[begin:end].tobytes(),
        "values": values[begin:end].tobytes(),
    }
