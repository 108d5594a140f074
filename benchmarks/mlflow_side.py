"""MLflow's half of benchmarks/bench_vs_mlflow.py, run with the Python of a separate
environment where MLflow is installed (never the product's).  It imports nothing of
opdweb.  Each call prints one JSON line.

    python mlflow_side.py version
    python mlflow_side.py ingest --uri postgresql+psycopg2://... --points points.npz --run NAME

``ingest`` logs the points of ``points.npz`` (``keys``: names, ``steps``: int64,
``values``: keys x steps, ``wall0``: seconds) into a new run, step after step with every
key at each step as a training loop logs them, through ``MlflowClient.log_batch`` in
batches of MLflow's maximum of 1,000 metrics; the clock runs from the first ``log_batch``
until the last has returned (MLflow's SQL store commits each).  The tracking store's
metric tables are emptied first, as the opdweb side's are, so both write into empty
tables.
"""
from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")

BATCH = 1000  # mlflow.utils.validation.MAX_METRICS_PER_BATCH


def ingest(uri: str, points: str, run_name: str, fresh: bool) -> dict:
    import numpy as np
    import sqlalchemy
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    data = np.load(points)
    keys, steps, values, wall0 = data["keys"].tolist(), data["steps"].tolist(), data["values"], float(data["wall0"])
    client = MlflowClient(tracking_uri=uri)  # creates MLflow's schema on first use
    experiment = client.get_experiment_by_name("bench") or client.get_experiment(
        client.create_experiment("bench", artifact_location=os.path.join(os.path.dirname(points), "artifacts")))
    if fresh:
        with sqlalchemy.create_engine(uri).begin() as db:
            db.execute(sqlalchemy.text("TRUNCATE metrics, latest_metrics"))
    run_id = client.create_run(experiment.experiment_id, run_name=run_name).info.run_id
    columns = values.tolist()
    metrics = []
    start = time.perf_counter()
    for i, step in enumerate(steps):
        timestamp = int((wall0 + step) * 1000)
        for key, column in zip(keys, columns, strict=True):
            metrics.append(Metric(key, column[i], timestamp, step))
        if len(metrics) >= BATCH:
            client.log_batch(run_id, metrics=metrics[:BATCH])
            metrics = metrics[BATCH:]
    if metrics:
        client.log_batch(run_id, metrics=metrics)
    seconds = time.perf_counter() - start
    return {"run_id": run_id, "seconds": seconds, "points": len(steps) * len(keys)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["version", "ingest"])
    parser.add_argument("--uri")
    parser.add_argument("--points")
    parser.add_argument("--run", default="bench")
    parser.add_argument("--fresh", action="store_true", help="empty MLflow's metric tables first")
    args = parser.parse_args()
    if args.command == "version":
        import mlflow

        print(json.dumps({"version": mlflow.__version__}))
    else:
        print(json.dumps(ingest(args.uri, args.points, args.run, args.fresh)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
