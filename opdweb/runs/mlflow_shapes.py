"""The JSON shapes MLflow's client reads (its protobuf messages as JSON): an experiment,
a run (info, data, inputs), a run's info.  int64 fields go as numbers, a double that is
not finite as ``"NaN"`` / ``"Infinity"`` / ``"-Infinity"``, as MLflow's server sends them."""
from __future__ import annotations

import math

from django.db.models import F

from opdweb.jobs.models import JobState
from opdweb.runs.models import MlflowExperiment, MlflowRun
from opdweb.traces.models import TracePoint

#: The job's state as MLflow's ``RunStatus``; a run ends FINISHED, FAILED or KILLED.
STATUS_OF_STATE = {JobState.QUEUED: "SCHEDULED", JobState.RUNNING: "RUNNING", JobState.SUCCEEDED: "FINISHED",
                   JobState.FAILED: "FAILED", JobState.CANCELLED: "KILLED"}
STATE_OF_STATUS = {"FINISHED": JobState.SUCCEEDED, "FAILED": JobState.FAILED, "KILLED": JobState.CANCELLED}


def ms(moment) -> int | None:
    return int(moment.timestamp() * 1000) if moment is not None else None


def double(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def artifact_path(run: MlflowRun) -> str:
    """The run's files' folder, relative to the artifact store's root."""
    return f"{run.experiment_id}/{run.run_id}/artifacts"


def artifact_uri(run: MlflowRun) -> str:
    """Where the run's files are, as MLflow's server with ``--serve-artifacts`` names them
    (the client resolves it against the tracking URI: :mod:`.mlflow_artifacts`)."""
    return f"mlflow-artifacts:/{artifact_path(run)}"


def artifact_location(experiment_id) -> str:
    return f"mlflow-artifacts:/{experiment_id}"


def experiment(exp: MlflowExperiment) -> dict:
    created = ms(exp.created_at)
    return {"experiment_id": str(exp.pk), "name": exp.name, "artifact_location": artifact_location(exp.pk),
            "lifecycle_stage": "active",
            "creation_time": created, "last_update_time": created,
            "tags": [{"key": k, "value": v} for k, v in exp.tags.items()]}


def run_info(run: MlflowRun) -> dict:
    job = run.job
    info = {"run_id": run.run_id, "run_uuid": run.run_id, "run_name": job.name, "experiment_id": str(run.experiment_id),
            "user_id": run.user_id, "status": STATUS_OF_STATE[job.state], "start_time": run.start_time,
            "artifact_uri": artifact_uri(run), "lifecycle_stage": "active"}
    end = run.end_time if run.end_time is not None else ms(job.finished_at)
    if end is not None:
        info["end_time"] = end
    return info


def metric(key: str, value: float, wall_time: float, step: int) -> dict:
    """A trace point as MLflow's ``Metric`` (the wall time is the timestamp it was logged with)."""
    return {"key": key, "value": double(value), "timestamp": round(wall_time * 1000), "step": step}


def latest_metrics(job_id: int) -> list[dict]:
    """Each key's value at its last step, as ``runs/get`` answers them."""
    points = (TracePoint.objects.filter(series__job_id=job_id, step=F("series__last_step"))
              .values_list("series__key", "value", "wall_time", "step").order_by("series__key"))
    return [metric(key, value, wall, step) for key, value, wall, step in points]


def run(run: MlflowRun, metrics: list[dict] | None = None) -> dict:
    """The run as ``runs/get`` answers it; ``metrics``, its latest, when already read."""
    config = run.job.config
    return {"info": run_info(run),
            "data": {"metrics": latest_metrics(run.job_id) if metrics is None else metrics,
                     "params": [{"key": k, "value": v} for k, v in config.get("params", {}).items()],
                     "tags": [{"key": k, "value": v} for k, v in config.get("tags", {}).items()]},
            "inputs": {}}
