"""Points per second from ``wandb.log`` into the product, against the same client logging
offline to its local files (the client's own ceiling), side by side in one run:

    python -m opdweb.launcher exec -- .venv/bin/python benchmarks/bench_wandb_ingest.py

- **into the product**: the official ``wandb`` client (the test environment's pin, its own
  ``wandb-core`` process) in a process of its own, ``run.log({10 keys}, step=s)`` per step,
  then ``run.finish()``, with ``WANDB_BASE_URL=http://<product>/wandb`` and a read-write token
  as ``WANDB_API_KEY``, through the product's web server (``opdweb.web_server``);
- **offline**: the same script with ``WANDB_MODE=offline``: the client writes its run
  files and talks to no server.

Each is timed from its first ``log`` to ``finish()`` returning (every point acknowledged by
the product, or written to disk offline), with the client's defaults (its file stream sends
every 15 s, and at the end); the points stored are counted afterwards (every one once).
``--reps`` rounds, interleaved, the median kept.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import figures
from harness import ROOT, bench_database, child_env, daphne, load, team_and_user

WANDB = """
import json, sys, time
import wandb
keys, steps = int(sys.argv[1]), int(sys.argv[2])
names = [f"k{i}" for i in range(keys)]
run = wandb.init(project="bench", settings=wandb.Settings(x_disable_stats=True, console="off"))
started = time.perf_counter()
for step in range(steps):
    run.log({name: step * 0.5 + i for i, name in enumerate(names)}, step=step)
logged = time.perf_counter() - started
run.finish()
print(json.dumps({"seconds": time.perf_counter() - started, "logged": logged, "run": run.id}))
"""


def run_wandb(shape: list[str], env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", WANDB, *shape], env=env, cwd=env["WANDB_DIR"], capture_output=True,
                         text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def stored(run_name: str) -> tuple[int, int]:
    """(points stored, distinct (key, step)) of the W&B run ``run_name``."""
    from django.db import connection

    from opdweb.runs.models import WandbRun

    job_id = WandbRun.objects.get(name=run_name).run.job_id
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), count(DISTINCT (s.key, p.step)) FROM traces_tracepoint p "
                       "JOIN traces_traceseries s ON s.id = p.series_id WHERE s.job_id = %s", [job_id])
        return cursor.fetchone()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="opdweb_bench_wandb_ingest")
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--record", action="store_true", help="store the README row (docs/benchmarks/figures.json)")
    args = parser.parse_args()
    n = args.keys * args.steps
    shape = [str(args.keys), str(args.steps)]
    started = time.monotonic()
    import wandb

    with bench_database(args.database), daphne() as host, tempfile.TemporaryDirectory() as workdir:
        team, user, _ = team_and_user()
        from opdweb.tokens.actions import do_create_token

        _, key = do_create_token(user=user, team=team, name="bench", can_write=True)
        base = {k: v for k, v in child_env().items() if not k.startswith("WANDB_")}
        base.update({"WANDB_API_KEY": key, "WANDB_DIR": workdir, "WANDB_CONFIG_DIR": os.path.join(workdir, "config"),
                     "WANDB_CACHE_DIR": os.path.join(workdir, "cache"), "WANDB_ERROR_REPORTING": "false",
                     "WANDB_DISABLE_GIT": "true", "WANDB_DISABLE_CODE": "true", "WANDB_SILENT": "true"})
        online = {**base, "WANDB_BASE_URL": f"http://{host}/wandb"}
        offline = {**base, "WANDB_MODE": "offline"}
        run_wandb(["1", "10"], online)  # warm: the web process imports the trace sink at its first write
        results: dict[str, list[dict]] = {"into the product": [], "offline (its local files)": []}
        counts: list[tuple[int, int]] = []
        for _ in range(args.reps):
            answer = run_wandb(shape, online)
            results["into the product"].append(answer)
            counts.append(stored(answer["run"]))
            results["offline (its local files)"].append(run_wandb(shape, offline))
    ceiling = n / statistics.median(r["seconds"] for r in results["offline (its local files)"])
    print(f"wandb {wandb.__version__}: {args.keys} keys x {args.steps:,} steps = {n:,} points per run")
    print(f"| path | points/s, log to finish (median of {args.reps}) | of offline | log calls alone | "
          "stored (distinct) |")
    print("|---|---|---|---|---|")
    for name, runs in results.items():
        rate = n / statistics.median(r["seconds"] for r in runs)
        calls = n / statistics.median(r["logged"] for r in runs)
        kept = ", ".join(f"{c:,} ({d:,})" for c, d in counts) if name == "into the product" else "on disk"
        print(f"| {name} | {rate:,.0f} | {rate / ceiling:.0%} | {calls:,.0f} | {kept} |")
    print(f"\n({time.monotonic() - started:.0f} s; load average at the end: {load()})")
    ok = all(c == (n, n) for c in counts)
    if args.record and ok:
        into = n / statistics.median(r["seconds"] for r in results["into the product"])
        figures.record([{
            "id": "wandb-points", "page": "docs/tracking.md#points-per-second-from-wandblog", "page_title": "tracking",
            "what": f"points/s from `wandb.log` (wandb {wandb.__version__}) into the product / the same client "
                    "offline (its ceiling)",
            "latest": f"{into:,.0f} / {ceiling:,.0f} ({100 * into / ceiling:.0f} %)", "goal": ""}])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
