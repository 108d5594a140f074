"""Run a command on a machine kept busy: ``--loops`` processes spinning on the CPU (at
``--nice``), the load average sampled every ``--every`` seconds while it runs.

    python -m tests.busy --loops 13 --nice 10 -- bash .ci/run

How docs/testing.md's "at load 15" run is made: CI's machines are shared, and a suite that
passes only on a quiet one is not done. The busy loops are niced so the suite still gets a
share of the cores (a loop at nice 10 weighs about a tenth of a process at nice 0), while the
load average counts every one of them. Prints the command's wall time and the load
average's mean and peak over the run, and exits with the command's status."""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time


def spin(nice: int) -> None:
    os.nice(nice)
    while True:
        pass


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loops", type=int, default=13)
    parser.add_argument("--nice", type=int, default=10)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between load-average samples")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    loops = []
    for _ in range(args.loops):
        pid = os.fork()
        if pid == 0:
            spin(args.nice)
        loops.append(pid)
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(args.every):
            samples.append(os.getloadavg()[0])

    threading.Thread(target=sample, daemon=True).start()
    start = time.monotonic()
    try:
        status = subprocess.call(command)
    finally:
        done.set()
        for pid in loops:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    minutes = (time.monotonic() - start) / 60
    mean = sum(samples) / len(samples) if samples else float("nan")
    print(f"busy: {' '.join(command)} exited {status} after {minutes:.1f} min beside {args.loops} busy loops at "
          f"nice {args.nice}; 1-minute load average mean {mean:.1f}, peak {max(samples, default=float('nan')):.1f} "
          f"({len(samples)} samples)", file=sys.stderr, flush=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
