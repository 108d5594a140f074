"""The worker-side trace sink: batches points, writes them with binary COPY, keeps the
rollup pyramid current, then hands them to a ``publish`` callback for the live channel.

Timing.  A point added is written and published within ``flush_seconds`` (default 50 ms)
whatever the logging rate, even if nothing is added after it: a writer thread owns the
flushes.  The first point after a quiet spell goes out at once; while points keep coming,
a flush starts at most every ``flush_seconds`` (or as soon as ``flush_points`` wait), so
batches grow with the rate and stay cheap.  The writer thread writes on its own database
connection (Django's are per thread) and closes it when the sink closes.  A sink made
inside an open transaction (a test, a management command wrapping its work in one)
cannot hand its points to another connection, which would not see the job row nor honour
the transaction; it flushes in the caller instead, from ``add`` and ``flush``.

Cost per point.  ``add`` is a few list operations per call, whatever the number of keys
(:mod:`opdweb.traces.pending`); a flush turns the calls into arrays, encodes the COPY
stream in whole-array operations, and reduces the rollup pyramid level from level.

Back-pressure.  A producer faster than the database waits once ``8 x flush_points`` points
are pending.  When the writer takes such a batch, the producer stays held until the
batch's COPY starts: the writer's preparation (arrays, series, rollups, encoding) then has
the interpreter to itself, rather than waiting for it at each step while PostgreSQL idles,
and the producer fills the next batch while PostgreSQL writes this one.

After each committed batch (:mod:`.batches`), a second thread publishes it to the live
channel (:mod:`.live_packing`: after the commit, so a consumer that replays from the
database after joining the group misses nothing) and a third keeps the tables' statistics
current (:mod:`.analyze`): an ANALYZE of a large table, which takes a while, holds back
neither the writer nor the live channel.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable, Mapping

from django.db import connection

from opdweb.traces.analyze import ANALYZE_CHECK_ROWS, analyze_if_needed
from opdweb.traces.batches import write_points
from opdweb.traces.live_packing import live_messages
from opdweb.traces.models import MAX_STEP, POINTS_TABLE, ROLLUP_TABLE, SERIES_TABLE
from opdweb.traces.pending import PendingPoints

log = logging.getLogger(__name__)

# Batches waiting to be published beyond this are not published (liveness only).
MAX_UNPUBLISHED = 64
# The writer thread closes its database connection after this long with nothing to write.
IDLE_CLOSE_SECONDS = 2.0

Publish = Callable[[list[dict]], None]


def check_steps(first: int, last: int) -> None:
    """Refuse steps a trace cannot hold: below 0, or past :data:`MAX_STEP`."""
    if first < 0:
        raise ValueError("trace steps start at 0")
    if last > MAX_STEP:
        raise ValueError(f"trace steps end at 2**53 - 1 ({MAX_STEP:,}); got {last:,}")


class TraceSink:
    """Buffers points for one job and writes them in batches.

    ``flush_seconds`` bounds how long a point waits before it is written and published;
    ``flush_points`` starts a flush early when that many points wait.  ``publish`` is
    called with the live messages after each committed flush (``None``: no publishing),
    from a second thread so the writer goes on meanwhile.  :meth:`flush` returns once
    everything added is written; :meth:`close` also waits for the publishing and the
    closing statistics check, and stops the threads.  Call it at the end.
    """

    def __init__(self, job_id: int, *, flush_points: int = 20_000, flush_seconds: float = 0.05,
                 publish: Publish | None = None, analyze: bool = True):
        self.job_id = job_id
        self.flush_points = max(1, int(flush_points))
        self.flush_seconds = float(flush_seconds)
        self.publish = publish or None  # tolerates the older ``publish=False``
        self._last_written: dict[str, int] = {}  # per key, the last step this sink wrote (its live "after")
        self.analyze = analyze
        # A writer thread owns flushes, unless the caller holds a transaction its points
        # must stay inside (see the module docstring).
        self.threaded = self.flush_seconds > 0 and not connection.in_atomic_block
        # ``with self._lock`` (C-level) rather than ``with self._cond`` on the per-step path.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._pending = PendingPoints()
        self._oldest: float | None = None
        self._added = 0  # points ever added
        self._done = 0  # points ever taken by a finished write (or a failed one)
        self._flush_asked = False
        self._held = False  # a producer held back stays so until the batch's COPY starts
        self._closing = False
        self._closed = False
        self._error: BaseException | None = None
        self._last_start = float("-inf")
        # Rows this sink wrote per table since it last ran ANALYZE on it, and since it
        # last checked (owned by the statistics thread).
        self._unanalysed = {POINTS_TABLE: 0, ROLLUP_TABLE: 0, SERIES_TABLE: 0}
        self._since_check = 0
        self._thread: threading.Thread | None = None
        # Publishing and ANALYZE run after each commit in threads of their own, so the
        # writer goes on with the next batch meanwhile.
        self._followups: dict[str, tuple[queue.SimpleQueue, threading.Thread]] = {}
        if self.threaded:
            for part in ("live", "statistics"):
                work: queue.SimpleQueue = queue.SimpleQueue()
                thread = threading.Thread(target=self._follow_up, args=(work,), name=f"trace-sink-{job_id}-{part}",
                                          daemon=True)
                thread.start()
                self._followups[part] = (work, thread)
            self._thread = threading.Thread(target=self._writer, name=f"trace-sink-{job_id}", daemon=True)
            self._thread.start()

    def __len__(self) -> int:
        return self._pending.count

    # -- adding -------------------------------------------------------------------------

    def add(self, step: int, values: Mapping[str, float], wall_time: float | None = None) -> None:
        check_steps(step, step)
        wall = time.time() if wall_time is None else wall_time
        with self._lock:
            if self._error is not None or self._closing or self._closed:
                self._refuse_locked()
            self._added_locked(self._pending.add(step, wall, values))

    def add_many(self, key: str, steps, values, wall_times) -> None:
        """Bulk form for imports and benchmarks: one key, parallel sequences."""
        steps = list(steps)
        if steps:
            check_steps(min(steps), max(steps))
        with self._lock:
            if self._error is not None or self._closing or self._closed:
                self._refuse_locked()
            self._added_locked(self._pending.add_many(key, steps, values, wall_times))

    def _refuse_locked(self) -> None:
        self._raise_error()
        raise RuntimeError("this trace sink is closed")

    def _added_locked(self, n: int) -> None:
        if not n:
            return
        count = self._pending.count
        self._added += n
        if not self.threaded:
            now = time.monotonic()
            if self._oldest is None:
                self._oldest = now
            if count >= self.flush_points or now - self._oldest >= self.flush_seconds:
                self._flush_inline()
            return
        # Wake the writer when there is something new for it to decide on: the first
        # points after it emptied the buffer, or the buffer reaching ``flush_points``.
        # Not on every add past that: a busy writer looks at the buffer again anyway.
        if count == n or count - n < self.flush_points <= count:
            self._cond.notify_all()
        # Back-pressure: a producer far faster than the database waits for the writer.
        while ((self._pending.count >= 8 * self.flush_points or self._held) and not self._closing
               and self._error is None):
            self._cond.wait(0.5)

    # -- flushing -----------------------------------------------------------------------

    def flush(self) -> int:
        """Write (and publish) everything added so far; returns how many points that was."""
        if not self.threaded:
            with self._lock:
                self._raise_error()
                return self._flush_inline()
        with self._lock:
            target = self._added
            before = self._done
            self._flush_asked = True
            self._cond.notify_all()
            while self._done < target and self._error is None and self._thread.is_alive():
                self._cond.wait(0.5)
            self._raise_error()
            return self._done - before

    def close(self) -> None:
        """Write what is left, stop the writer thread and close its connection.  Raises
        the writer's error, if any batch failed, once."""
        if self._closed:
            return
        self._closed = True
        if self.threaded:
            with self._lock:
                self._closing = True
                self._cond.notify_all()
            self._thread.join()
            for _, thread in self._followups.values():
                thread.join()
        else:
            with self._lock:
                self._flush_inline()
            self._finish_analyze()
        with self._lock:
            self._raise_error()

    def _release_producer(self) -> None:
        if self._held:
            with self._lock:
                self._held = False
                self._cond.notify_all()

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _take_locked(self) -> PendingPoints:
        pending, self._pending, self._oldest = self._pending, PendingPoints(), None
        return pending

    def _flush_inline(self) -> int:
        pending = self._take_locked()
        if pending.count:
            self._write(pending)
            self._done += pending.count
        return pending.count

    def _writer(self) -> None:
        """The writer thread: waits for points, flushes when they are due."""
        try:
            try:  # connect now, not when the first point is due
                connection.ensure_connection()
            except Exception:  # noqa: BLE001 - the first write will say what is wrong
                pass
            while True:
                with self._lock:
                    while True:
                        if self._pending.count:
                            if self._flush_asked or self._closing or self._pending.count >= self.flush_points:
                                break
                            wait = self._last_start + self.flush_seconds - time.monotonic()
                            if wait <= 0:
                                break
                            self._cond.wait(wait)
                        elif self._closing:
                            return
                        else:
                            self._flush_asked = False
                            # Idle: give the connection back rather than hold a session.
                            if not self._cond.wait(IDLE_CLOSE_SECONDS) and not self._pending.count:
                                connection.close()
                    self._last_start = time.monotonic()
                    self._flush_asked = False
                    pending = self._take_locked()
                    # A producer held back by back-pressure goes on once this batch's COPY
                    # starts, not before: preparing the batch (arrays, series, encoding)
                    # then has the interpreter to itself while PostgreSQL waits for it.
                    self._held = pending.count >= 8 * self.flush_points
                    if not self._held:
                        self._cond.notify_all()
                try:
                    self._write(pending)
                except Exception as exc:  # noqa: BLE001 - handed to the caller
                    log.warning("trace sink of job %s: a batch of %s points failed", self.job_id, pending.count,
                                exc_info=True)
                    connection.close_if_unusable_or_obsolete()
                    with self._lock:
                        self._error = self._error or exc
                finally:
                    with self._lock:
                        self._held = False
                        self._done += pending.count
                        self._cond.notify_all()
        finally:
            self._finish_analyze()
            for work, _ in self._followups.values():
                work.put(None)
            connection.close()

    def _follow_up(self, work: queue.SimpleQueue) -> None:
        """A follow-up thread: publishes committed batches in order, or runs ANALYZE."""
        try:
            while (item := work.get()) is not None:
                self._after_commit(*item)
        finally:
            connection.close()

    def _after_commit(self, what: str, arg=None) -> None:
        try:
            if what == "publish":
                self.publish(live_messages(*arg))
            elif what == "written":
                for table, rows in arg.items():
                    self._unanalysed[table] += rows
                    self._since_check += rows
                if self._since_check >= ANALYZE_CHECK_ROWS:
                    self._check_statistics()
            elif what == "closing" and self._since_check:
                self._check_statistics()
        except Exception:  # noqa: BLE001 - liveness and statistics only; the points are committed
            log.warning("trace sink of job %s: %s failed", self.job_id, what, exc_info=True)

    def _check_statistics(self) -> None:
        self._since_check = 0
        for table in analyze_if_needed(self._unanalysed):
            self._unanalysed[table] = 0

    def _then(self, what: str, arg=None) -> None:
        if self._followups:
            self._followups["live" if what == "publish" else "statistics"][0].put((what, arg))
        else:
            self._after_commit(what, arg)

    def _write(self, pending: PendingPoints) -> None:
        """Write one batch (in whichever thread flushes); publishing follows the commit."""
        arrays = pending.arrays()
        written = write_points(self.job_id, arrays, self._release_producer)
        after = {key: self._last_written[key] for key in arrays if key in self._last_written}
        for key, (steps, _, _) in arrays.items():
            if len(steps):
                self._last_written[key] = max(int(steps.max()), self._last_written.get(key, -1))
        if self.publish is not None:
            if self._followups and self._followups["live"][0].qsize() > MAX_UNPUBLISHED:
                # The channel cannot keep up: the database has the points, and a page
                # that reconnects gets them; memory stays bounded.
                log.warning("trace sink of job %s: live channel behind, %s points not published", self.job_id,
                            pending.count)
            else:
                self._then("publish", (arrays, after))
        if self.analyze:
            self._then("written", written)

    def _finish_analyze(self) -> None:
        if self.analyze:
            self._then("closing")
