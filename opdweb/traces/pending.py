"""Points a trace sink holds between flushes, kept so that logging a step is cheap.

A run logs several keys per step (``add(step, {key: value, ...})``), usually the same
keys step after step.  So the points are grouped by the tuple of keys they were logged
with: one call appends its step, wall time and call number once, and its values with
one ``extend``, whatever the number of keys.  A flush turns each group into arrays in
one pass (the values are a ``calls x keys`` matrix) and hands each key its points in
the order they were added, also when the key was logged in several groups.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

Arrays = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]


class PendingPoints:
    """Points added and not yet written; ``count`` is how many."""

    __slots__ = ("groups", "count", "calls")

    def __init__(self) -> None:
        # keys -> (steps, wall times, call numbers, values flattened call by call)
        self.groups: dict[tuple[str, ...], tuple[list, list, list, list]] = {}
        self.count = 0
        self.calls = 0

    def add(self, step: int, wall: float, values: Mapping[str, float]) -> int:
        """One step's values, all at ``wall``; returns how many points that was."""
        keys = tuple(values)
        if not keys:
            return 0
        group = self.groups.get(keys)
        if group is None:
            group = self.groups[keys] = ([], [], [], [])
        group[0].append(step)
        group[1].append(wall)
        group[2].append(self.calls)
        group[3].extend(values.values())
        self.calls += 1
        self.count += len(keys)
        return len(keys)

    def add_many(self, key: str, steps: Iterable[int], values: Iterable[float], walls: Iterable[float]) -> int:
        """One key's points from parallel sequences; returns how many."""
        steps, values, walls = list(steps), list(values), list(walls)
        if not len(steps) == len(values) == len(walls):
            raise ValueError(f"{len(steps)} steps, {len(values)} values and {len(walls)} wall times")
        if not steps:
            return 0
        group = self.groups.get((key,))
        if group is None:
            group = self.groups[(key,)] = ([], [], [], [])
        group[0].extend(steps)
        group[1].extend(walls)
        group[2].extend(range(self.calls, self.calls + len(steps)))
        group[3].extend(values)
        self.calls += len(steps)
        self.count += len(steps)
        return len(steps)

    def arrays(self) -> Arrays:
        """``{key: (steps int64, wall times float64, values float64)}``, each key's points
        in the order they were added."""
        parts: dict[str, list[tuple[np.ndarray, ...]]] = {}
        for keys, (steps, walls, calls, values) in self.groups.items():
            s = np.asarray(steps, dtype=np.int64)
            w = np.asarray(walls, dtype=np.float64)
            c = np.asarray(calls, dtype=np.int64)
            v = np.asarray(values, dtype=np.float64).reshape(len(s), len(keys))
            for j, key in enumerate(keys):
                parts.setdefault(key, []).append((c, s, w, v[:, j]))
        out: Arrays = {}
        for key, segments in parts.items():
            if len(segments) == 1:
                _, s, w, v = segments[0]
            else:  # logged with different companions: back into call order
                c, s, w, v = (np.concatenate(column) for column in zip(*segments, strict=True))
                order = np.argsort(c, kind="stable")
                s, w, v = s[order], w[order], v[order]
            out[key] = (s, w, v)
        return out
