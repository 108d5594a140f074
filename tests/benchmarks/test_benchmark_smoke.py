"""Every benchmark in ``benchmarks/`` runs to its end at a smoke size, so a change that breaks
one fails here rather than the day someone wants its figures.  Each runs as its page in
docs/benchmarks/ says, as a process of its own, against the suite's PostgreSQL server (a
database of its own, made and dropped by the benchmark) and a Redis of its own, two at a
time (:class:`SmokeRuns`); the test asserts only
that it exited 0 and printed its table or JSON, never its figures (they mean nothing at
these sizes on a shared machine).

A script in ``benchmarks/`` with neither a smoke size in ``SMOKE`` nor a stated reason in
``NOT_SMOKED`` fails ``test_it_knows_every_benchmark``.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings

from opdweb.embedded_servers import start_embedded_redis

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
TOY = "tests/science/fixtures/toy-test"  # the shipped test-size pair (tests/science/conftest.py)
#: MLflow with its server, in an environment of its own: the one `make test` installs, else OPDWEB_MLFLOW_PYTHON.
MLFLOW_SERVER_PYTHON = ROOT / "var" / "mlflow-server" / "bin" / "python"
MLFLOW_PYTHON = os.environ.get("OPDWEB_MLFLOW_PYTHON") or (str(MLFLOW_SERVER_PYTHON) if MLFLOW_SERVER_PYTHON.is_file()
                                                           else None)
CEILING_S = 600  # a generous ceiling for one benchmark on a busy machine, never the expected time

#: Imported by the benchmarks, never run on their own.
HELPERS = {"__init__.py", "figures.py", "harness.py", "mlflow_side.py", "plotly_png.py"}


@dataclass(frozen=True)
class Smoke:
    """One benchmark at its smoke size: its arguments (``{database}`` and ``{tmp}``, a folder
    this module's runs share, filled in here), what its output must contain once it has run
    to the end, its marks, and the benchmark whose output it reads (run first, once)."""

    args: tuple[str, ...]
    prints: str  # a regular expression its stdout must match (its table), or "json": stdout is one object
    marks: tuple = ()
    reads: str | None = None


BROWSER = pytest.mark.browser
NO_MLFLOW = pytest.mark.skipif(not MLFLOW_PYTHON, reason="needs MLflow's server in an environment of its own: "
                               "make test installs it in var/mlflow-server, or set OPDWEB_MLFLOW_PYTHON to its python")
SMOKE: dict[str, Smoke] = {
    # The trace store and the pages, on the servers the launcher gives (DATABASE_URL, REDIS_URL).
    "bench_traces.py": Smoke(("--keys", "2", "--steps", "200", "--reps", "1", "--database", "{database}"),
                             r"Ingest 400 points .*\n(.*\n)+  sink, publishing on "),
    "bench_reads.py": Smoke(("--sizes", "2000", "--reps", "2", "--database", "{database}"), r"load average"),
    "bench_live.py": Smoke(("--rates", "20", "--seconds", "1", "--database", "{database}"),
                           r"points/s, +20 points: p50"),
    "bench_export.py": Smoke(("--points", "2000", "--stall", "0.5", "--reps", "1", "--database", "{database}"),
                             r"\| reader \| server \|"),
    "bench_ingest_paths.py": Smoke(("--keys", "2", "--steps", "200", "--reps", "1", "--database", "{database}",
                                    *(("--mlflow-python", MLFLOW_PYTHON) if MLFLOW_PYTHON else ())),
                                   r"\| MLflow client, to a server that answers at once \|"),
    "bench_vs_mlflow.py": Smoke(("--mlflow-python", MLFLOW_PYTHON or "", "--keys", "2", "--steps", "200",
                                 "--reps", "1", "--read-points", "2000", "--read-reps", "2", "--database",
                                 "{database}"), r"chart read, 2,000 pts, 1%", (NO_MLFLOW,)),
    "bench_alert.py": Smoke(("--crossings", "2", "--database", "{database}"), r"2 crossings .*: p50"),
    "bench_job_list.py": Smoke(("--jobs", "50", "--reps", "2", "--database", "{database}"), r"worst p95"),
    # Fault injection (kills a worker, Redis, PostgreSQL; its own Redis); not its test-suite scenario (a
    # suite inside the suite).  It kills processes it started, so it carries the faults mark.
    "bench_reliability.py": Smoke(("--only", "kill,redis,pg,ws", "--kill-steps", "20", "--redis-jobs", "2",
                                   "--ws-jobs", "1", "--ws-clients-per-job", "1", "--ws-steps", "10", "--database",
                                   "{database}"), r"\| check \| rule or result \| how \|(.*\n)+\| PostgreSQL kill",
                                  (pytest.mark.faults,)),
    "bench_job_page.py": Smoke(("--keys", "2", "--steps", "1000", "--reps", "1", "--returning", "1", "--database",
                                "{database}"), r"returning +1 ", (BROWSER,)),
    # Real workers behind daphne: a measurement beside a calibration, Cancel per kind.
    "bench_scheduling.py": Smoke(("--prompts", "8", "--steps", "20", "--reps", "1", "--kinds",
                                  "selftest,mismatch,train,calibration", "--database", "{database}"),
                                 r"\| busy / idle \|(.*\n)+\| calibration \| [0-9.]+ \| cancelled \|"),
    "bench_wandb_ingest.py": Smoke(("--keys", "2", "--steps", "200", "--reps", "1", "--database", "{database}"),
                                   r"\| into the product \| .*\n\| offline \(its local files\) \|"),
    # make run on an empty data directory (its embedded servers), then the example path in Chromium.
    "bench_example_path.py": Smoke(("--smoke",), r"\| \*\*total, launch to export\*\* \|", (BROWSER,)),
    # The checkpoint cache against a real SeaweedFS, on the toy student.
    "bench_checkpoint_fetch.py": Smoke(("--model", f"{TOY}/student", "--reps", "1"),
                                       r"\| cold fetch \(S3 -> cache, verified\) \|"),
    # The science half on the shipped test-size toy pair, no database.
    "bench_admission.py": Smoke(("--model", f"{TOY}/student", "--prompts", "8", "--max-new-tokens", "8",
                                 "--repeats", "1"), "json"),
    "bench_mismatch.py": Smoke(("--model", f"{TOY}/student", "--prompts", "8", "--max-new-tokens", "8",
                                "--batch-size", "8", "--repeats", "1", "--unit", "hf"), "json"),
    "bench_sampling.py": Smoke(("--model", f"{TOY}/student", "--prompts", "8", "--max-new-tokens", "8",
                                "--repeats", "1", "--engines", "hf"), "json"),
    "bench_training.py": Smoke(("--student", f"{TOY}/student", "--teacher", f"{TOY}/teacher", "--batch", "8",
                                "--steps", "2"), "json"),
    "bench_training_rollout.py": Smoke(("--student", f"{TOY}/student", "--teacher", f"{TOY}/teacher", "--batch",
                                        "8", "--steps", "2", "--engines", "hf"), "json"),
    "bench_learning.py": Smoke(("--student", f"{TOY}/student", "--teacher", f"{TOY}/teacher", "--seeds", "1",
                                "--steps", "2", "--budget-s", "60", "--batch", "8", "--eval-prompts", "16"),
                               r"\| method \| lr \|(.*\n)+\| grpo_tis \|"),
    # The real-model rows on the toy (one ladder row, the module scan, the drift), and the
    # sensitivity map drawn from its result file in Chromium.
    "bench_real_model.py": Smoke(("--model", f"toy={TOY}/student", "--prompts", "4", "--max-new-tokens", "8",
                                  "--ladder-rows", "1", "--skip-unit-factor", "--skip-scans", "layer",
                                  "--cache-dir", "{tmp}/real-model-cache", "--out", "{tmp}/real-model.json"),
                                 r"\| FP8 W, per tensor \|(.*\n)+module scan of (.*\n)+Prefix drift of "),
    # Only its tables and chart, from the committed results (--tables-from): its calibrations
    # train the demo toy pair for about 30 minutes on 2 cores, beyond a smoke at any size that
    # still decides a budget.
    "reproduce_budget.py": Smoke(("--tables-from", "docs/budget/results.json", "--out", "{tmp}/budget"),
                                 r"pair's k3(.*\n)+\| method \| budget \(strict\) \|(.*\n)+Late checkpoint",
                                 (BROWSER,)),
    "sensitivity_heatmap.py": Smoke(("--out", "{tmp}/sensitivity-map.png", "toy={tmp}/real-model.json"),
                                    r"wrote .*sensitivity-map.png", (BROWSER,), reads="bench_real_model.py"),
}

#: The benchmarks with no smoke size, and why.
NOT_SMOKED = {
    "gpu_check.sh": "needs CUDA (nvidia-smi)",
    "gpu_real_calibration.sh": "hours on a CUDA host (a real model's calibration sweep)",
    "gpu_check.py": "its smallest CPU dry run (--device cpu --tiny --size test, 8 prompts of 4 tokens) took 72 s "
                    "at load 2 and 181 s at load 8 on 2 cores, mostly the tiny model's 151,936-token vocabulary: "
                    "over a smoke's budget (the whole module is about 3 min)",
}


def test_it_knows_every_benchmark():
    scripts = {p.name for p in BENCHMARKS.iterdir() if p.suffix in (".py", ".sh")} - HELPERS
    known = set(SMOKE) | set(NOT_SMOKED)
    assert not set(SMOKE) & set(NOT_SMOKED)
    assert scripts == known, ("every benchmark needs a smoke size in SMOKE (or a reason in NOT_SMOKED): "
                              f"missing {sorted(scripts - known)}, gone {sorted(known - scripts)}")


#: Smokes run this many at a time: most of a smoke's time is spent starting servers and
#: waiting on them, so two overlap even on two cores.
CONCURRENT = 2


class SmokeRuns:
    """Every smoke this session selected, started at the module's first test, ``CONCURRENT``
    at a time, each as a process of its own with a Redis of its own: Redis's pub/sub
    channels ignore the database number, so two benchmarks on one server would hear each
    other's jobs (their job ids come from databases of their own and repeat)."""

    def __init__(self, scripts: list[str], shared: Path):
        self.shared = shared
        self.pool = ThreadPoolExecutor(CONCURRENT)
        self.runs: dict[str, Future] = {}
        sources = [SMOKE[s].reads for s in scripts if SMOKE[s].reads]
        needed = list(dict.fromkeys(scripts + [s for s in sources if s]))
        # what a smoke reads is submitted before it, so it is running or done when the reader waits
        for script in sorted(needed, key=lambda s: SMOKE[s].reads is not None):
            self.runs[script] = self.pool.submit(self.run, script)

    def result(self, script: str) -> subprocess.CompletedProcess:
        return self.runs[script].result()

    def run(self, script: str) -> subprocess.CompletedProcess:
        """Run ``script`` at its smoke size, after the benchmark whose output it reads."""
        reads = SMOKE[script].reads
        if reads:
            self.runs[reads].result()
        # A database of its own on the shared server, named after the suite's, so that suites
        # side by side on one server never meet.
        database = f"{settings.DATABASES['default']['NAME']}_smoke_{Path(script).stem}"[:63]
        args = [a.format(database=database, tmp=self.shared) for a in SMOKE[script].args]
        redis_url, redis = start_embedded_redis(self.shared / f"redis-{Path(script).stem}")
        try:
            return subprocess.run([sys.executable, str(BENCHMARKS / script), *args], cwd=ROOT,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1", "REDIS_URL": redis_url},
                                  capture_output=True, text=True, timeout=CEILING_S)
        finally:
            redis.stop(time.monotonic() + 15)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def smokes(request, tmp_path_factory):
    selected = [item.callspec.params["script"] for item in request.session.items
                if item.module is request.module and getattr(item, "originalname", "") == "test_it_runs_to_the_end"]
    runs = SmokeRuns(selected, tmp_path_factory.mktemp("benchmarks"))
    yield runs
    runs.close()


# Every run is a process with Django's or torch's start-up: tens of seconds on a busy machine.
@pytest.mark.slow
@pytest.mark.parametrize("script", [pytest.param(name, marks=smoke.marks) for name, smoke in SMOKE.items()])
def test_it_runs_to_the_end(script, smokes):
    smoke = SMOKE[script]
    if smoke.reads:
        assert smokes.result(smoke.reads).returncode == 0, f"{smoke.reads}, whose output {script} reads, failed"
    done = smokes.result(script)
    output = f"--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-6000:]}"
    assert done.returncode == 0, output
    if smoke.prints == "json":
        assert isinstance(json.loads(done.stdout), dict), output
    else:
        assert re.search(smoke.prints, done.stdout), output
