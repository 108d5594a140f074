"""The example path from an empty data directory to an export, as a newcomer walks it.

``make run``'s launcher starts on an empty ``OPDWEB_DATA_DIR`` with its embedded default
(PostgreSQL, Redis and the object store of its own; one solo worker on the ``gpu`` queue on
the CPU, one on ``cpu``, the control worker, daphne), builds the toy pair and the demo team,
and prints the admin's password.  Chromium (Playwright) then walks the product's own examples
(:mod:`tests.web.example_path`): the Budgets page's example calibration, an admission check of
the vLLM FP8 preset against the budget it stored, an approval by a teammate the admin invites,
and the vLLM export.  Each stage is timed from the click that starts it; the total runs from
launching ``make run`` to the export in hand (the issue's goal: 20 minutes on two cores).

    python benchmarks/bench_example_path.py            # the example as the form offers it
    python benchmarks/bench_example_path.py --smoke    # a smoke size (the browser test's)
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import figures  # noqa: E402  (no Django)

from opdweb.embedded_servers import free_port  # noqa: E402  (no Django)
from tests.web.example_path import SMOKE, walk  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"]


def launch(var: Path, port: int, log) -> subprocess.Popen:
    """``make run``'s command on an empty data directory, with the embedded default (no
    DATABASE_URL or REDIS_URL from this shell)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY")}
    env |= {"OPDWEB_DATA_DIR": str(var), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "opdweb.launcher", "run", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_up(proc: subprocess.Popen, log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "opdweb is up" in log_path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"make run ended ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"make run not up within {timeout:.0f} s:\n{log_path.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    """Ctrl-C, as a person stops it; then the whole group, whatever is left."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="the example calibration at the browser test's size")
    parser.add_argument("--ceiling-min", type=float, default=60.0, help="give up on a job after this many minutes")
    parser.add_argument("--shots", help="write each page's screenshot into this folder")
    parser.add_argument("--record", action="store_true",
                        help="store the README row (docs/benchmarks/figures.json; not with --smoke)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="opdweb-example-") as tmp:
        var, port = Path(tmp) / "var", free_port()
        log_path = Path(tmp) / "make-run.log"
        started = time.monotonic()
        with open(log_path, "w") as log:
            proc = launch(var, port, log)
            try:
                wait_up(proc, log_path, 600)
                up_s = time.monotonic() - started
                username, password = (line.split(": ", 1)[1] for line in
                                      (var / "credentials.txt").read_text().splitlines()[:2])
                with sync_playwright() as p:
                    browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
                    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
                    done = walk(page, f"http://127.0.0.1:{port}", username, password,
                                ceiling_ms=int(args.ceiling_min * 60_000), size=SMOKE if args.smoke else None,
                                shots=Path(args.shots) if args.shots else None)
                    browser.close()
                total_s = time.monotonic() - started
            finally:
                stop(proc)
    load = os.getloadavg()
    print(json.dumps({"size": "smoke" if args.smoke else "the example as offered", "make_run_up_s": round(up_s, 1),
                      "stages_s": done.seconds, "total_s": round(total_s, 1), "verdict": done.verdict,
                      "load_average": [round(x, 2) for x in load]}, indent=1))
    print(f"\n| stage | seconds |\n|---|---|\n| make run, empty data directory, to up | {up_s:.0f} |")
    for stage, seconds in done.seconds.items():
        print(f"| {stage} | {seconds:.0f} |")
    print(f"| **total, launch to export** | **{total_s:.0f}** ({total_s / 60:.1f} min) |\n\n"
          f"load average {load[0]:.2f}, {os.cpu_count()} cores")
    if args.record and not args.smoke:
        figures.record([record_row(up_s, done.seconds, done.verdict, total_s)])
    return 0


def record_row(up_s: float, stages: dict[str, float], verdict: str, total_s: float) -> dict:
    parts = [f"up {up_s:.0f} s", f"calibration {stages['calibration']:.0f} s",
             f"check {stages['admission']:.0f} s: {verdict}",
             f"approval and export {stages['approval and export']:.0f} s"]
    return {"id": "example-path", "page": "docs/benchmarks/example-path.md", "page_title": "example-path",
            "what": "the example path in Chromium: `make run` on an empty `var/` → the Budgets page's example "
                    "calibration → admission of the vLLM FP8 preset → a teammate's approval → the vLLM export",
            "latest": f"{total_s / 60:.1f} min ({', '.join(parts)})", "goal": "≤ 20 min"}


if __name__ == "__main__":
    raise SystemExit(main())
