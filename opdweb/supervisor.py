"""Keeps the product's processes running: a child that dies is restarted, alone.

Each child starts in a process group of its own (so stopping it stops whatever it
started, e.g. a Celery worker's beat) and is told to stop when the supervisor dies
(``PR_SET_PDEATHSIG``), so no orphan outlives a killed launcher.  A child that exits is
restarted after a backoff that doubles from ``BACKOFF_START_S`` to ``BACKOFF_MAX_S``; a
child that keeps dying (``CRASH_LOOP_RESTARTS`` exits within ``CRASH_LOOP_WINDOW_S``) is
a crash loop, and the supervisor stops everything rather than spin.

No Django here: the launcher runs this before any settings exist.
"""
from __future__ import annotations

import ctypes
import glob
import os
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0
CRASH_LOOP_RESTARTS = 5
CRASH_LOOP_WINDOW_S = 60.0
STOP_GRACE_S = 15.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the supervisor dies (Linux)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def log(message: str) -> None:
    print(f"opdweb: {message}", file=sys.stderr, flush=True)


class CrashLoop(RuntimeError):
    pass


@dataclass
class Child:
    """One supervised process.  ``user``: run it as that account (the embedded PostgreSQL,
    which refuses root); ``log_path``: its output appended there (else inherited);
    ``stop_signal``: what asks it to stop (PostgreSQL's fast shutdown is SIGINT);
    ``leftovers``: glob patterns of files it leaves behind when it is killed rather than
    stopped, removed once it is gone."""

    name: str
    command: list[str]
    env: dict
    cwd: Path
    user: str | None = None
    log_path: Path | None = None
    stop_signal: int = signal.SIGTERM
    proc: subprocess.Popen | None = None
    exits: deque = field(default_factory=deque)  # monotonic times of recent exits
    restart_at: float | None = None
    leftovers: tuple[str, ...] = ()

    def start(self) -> None:
        output = open(self.log_path, "ab") if self.log_path is not None else None  # noqa: SIM115 - the child keeps it
        try:
            self.proc = subprocess.Popen(self.command, env=self.env, cwd=self.cwd, start_new_session=True,
                                         preexec_fn=_die_with_parent, user=self.user, stdout=output,
                                         stderr=subprocess.STDOUT if output is not None else None)
        finally:
            if output is not None:
                output.close()
        self.restart_at = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal_group(self, sig: int) -> None:
        """Signal the child's whole process group (what it started, too)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, deadline: float) -> None:
        if self.proc is None:
            return
        self.signal_group(self.stop_signal)
        try:
            self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log(f"{self.name} did not stop in time; killing it")
        self.kill()  # what is left of the group, e.g. a beat child

    def kill(self) -> None:
        """kill -9 the whole group, wait for the child, and remove its ``leftovers``."""
        if self.proc is None:
            return
        self.signal_group(signal.SIGKILL)
        self.proc.wait()
        for pattern in self.leftovers:
            for path in glob.glob(pattern):
                Path(path).unlink(missing_ok=True)


class Supervisor:
    def __init__(self, children: list[Child]):
        self.children = children

    def start(self) -> None:
        for child in self.children:
            child.start()

    def check(self, now: float | None = None) -> None:
        """Restart children that exited, once their backoff has passed; raises
        :class:`CrashLoop` when one keeps dying."""
        now = time.monotonic() if now is None else now
        for child in self.children:
            if child.alive():
                continue
            if child.restart_at is None:
                code = child.proc.returncode if child.proc is not None else None
                child.signal_group(signal.SIGKILL)  # whatever the dead child left running
                child.exits.append(now)
                while child.exits and now - child.exits[0] > CRASH_LOOP_WINDOW_S:
                    child.exits.popleft()
                if len(child.exits) >= CRASH_LOOP_RESTARTS:
                    raise CrashLoop(f"{child.name} exited {len(child.exits)} times within {CRASH_LOOP_WINDOW_S:.0f} s")
                delay = min(BACKOFF_MAX_S, BACKOFF_START_S * 2 ** (len(child.exits) - 1))
                child.restart_at = now + delay
                log(f"{child.name} (pid {child.pid}) exited with code {code}; restarting in {delay:.0f} s")
            elif now >= child.restart_at:
                child.start()
                log(f"{child.name} restarted (pid {child.pid})")

    def stop(self) -> None:
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self.children:
            if child.alive():
                child.signal_group(child.stop_signal)
        for child in self.children:
            child.stop(deadline)
