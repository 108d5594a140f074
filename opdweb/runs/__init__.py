"""Runs that train elsewhere and report in: the MLflow-compatible tracking endpoints
(``/mlflow/api/2.0/mlflow/...``) through which a trainer's MLflow logger writes a run as
an ``external`` job of the token's team, its metrics into the same traces as every job.

Modules: :mod:`.models` (experiments, the MLflow face of a run), :mod:`.mlflow_requests`
(reading and checking MLflow's request bodies), :mod:`.mlflow_errors` (MLflow's error
shape), :mod:`.mlflow_shapes` (its response shapes), :mod:`.actions` (what the endpoints
do), :mod:`.points` (a batch's points into the trace store, once each), :mod:`.mlflow_views`.
"""
