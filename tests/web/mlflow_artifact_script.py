"""A trainer's artifact calls with the official MLflow client, one JSON line per call: what
it returned (or raised), with the ids a server makes replaced by placeholders, so that two
servers' transcripts compare line by line.  Run from the directory a trainer works in
(``MLFLOW_TRACKING_URI`` set); the last line is that directory's files, which no call may
change.  Used by tests/web/test_mlflow_artifacts.py against the product and against
MLflow's own server (``mlflow server --serve-artifacts``)."""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import mlflow
import numpy as np


def tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
            for p in sorted(folder.rglob("*")) if p.is_file()}


def main() -> int:
    ids: dict[str, str] = {}

    def said(value):
        """``value`` as JSON, each id the server made (a whole path segment) a placeholder."""
        if isinstance(value, dict):
            return {k: said(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [said(v) for v in value]
        if isinstance(value, str):
            return "/".join(ids.get(segment, segment) for segment in value.split("/"))
        return value

    def call(name, fn):
        try:
            value = fn()
            print(json.dumps({"call": name, "returned": said(value)}, sort_keys=True))
        except Exception as exc:  # noqa: BLE001 - the transcript says what was raised
            print(json.dumps({"call": name, "raised": type(exc).__name__}, sort_keys=True))

    work = Path.cwd()
    before = tree(work)
    scratch = Path(tempfile.mkdtemp())
    (scratch / "outputs" / "sub").mkdir(parents=True)
    (scratch / "outputs" / "a.txt").write_bytes(b"alpha")
    (scratch / "outputs" / "sub" / "b.bin").write_bytes(bytes(range(256)))
    (scratch / "top.json").write_text('{"k": 1}')
    client = mlflow.MlflowClient()
    experiment_id = mlflow.set_experiment("artifacts-differential").experiment_id
    run = mlflow.start_run()
    ids[run.info.run_id] = "<run>"
    ids[experiment_id] = "<experiment>"
    call("artifact_uri", lambda: run.info.artifact_uri)
    call("log_text", lambda: mlflow.log_text("x", "configs/rollout.yaml"))
    call("log_dict json", lambda: mlflow.log_dict({"lr": 1e-6, "steps": [1, 2]}, "configs/train.json"))
    call("log_dict yaml", lambda: mlflow.log_dict({"kv_cache": "fp8_e4m3"}, "configs/admitted.yaml"))
    call("log_artifact top-level", lambda: mlflow.log_artifact(str(scratch / "top.json")))
    call("log_artifact into a folder", lambda: mlflow.log_artifact(str(scratch / "top.json"), "deep/er"))
    call("log_artifacts", lambda: mlflow.log_artifacts(str(scratch / "outputs"), "outputs"))
    call("log_image", lambda: mlflow.log_image(np.zeros((4, 5, 3), dtype=np.uint8), "images/black.png"))
    call("log_artifact of a missing file", lambda: mlflow.log_artifact(str(scratch / "missing.txt")))
    listing = lambda path=None: [(f.path, f.is_dir, f.file_size) for f in client.list_artifacts(run.info.run_id, path)]  # noqa: E731
    call("list_artifacts", listing)
    call("list_artifacts outputs", lambda: listing("outputs"))
    call("list_artifacts of a file", lambda: listing("top.json"))
    call("list_artifacts of nothing", lambda: listing("nothing"))
    uri = run.info.artifact_uri
    call("load_text", lambda: mlflow.artifacts.load_text(f"{uri}/configs/rollout.yaml"))
    call("load_dict json", lambda: mlflow.artifacts.load_dict(f"{uri}/configs/train.json"))
    call("load_dict yaml", lambda: mlflow.artifacts.load_dict(f"{uri}/configs/admitted.yaml"))
    call("load_text of a missing file", lambda: mlflow.artifacts.load_text(f"{uri}/configs/none.txt"))
    fetched = scratch / "fetched"
    call("download_artifacts", lambda: tree(Path(mlflow.artifacts.download_artifacts(
        run_id=run.info.run_id, artifact_path="outputs", dst_path=str(fetched)))))
    call("download_artifacts of everything", lambda: tree(Path(mlflow.artifacts.download_artifacts(
        run_id=run.info.run_id, dst_path=str(scratch / "all")))))
    mlflow.end_run()
    call("working directory unchanged", lambda: tree(work) == before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
