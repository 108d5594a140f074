"""Runs that train elsewhere and report in: the MLflow-compatible tracking endpoints
(``/mlflow/api/2.0/mlflow/...``) and the W&B-compatible ones (``/wandb/graphql``, its file
stream and run files), through which a trainer's MLflow logger or ``wandb`` client writes a
run as an ``external`` job of the token's team, its metrics into the same traces as every job.

Modules: :mod:`.models` (experiments, the MLflow and W&B faces of a run), :mod:`.mlflow_requests`
(reading and checking MLflow's request bodies), :mod:`.mlflow_errors` (MLflow's error
shape), :mod:`.mlflow_shapes` (its response shapes), :mod:`.actions` (what the endpoints
do), :mod:`.points` (a batch's points into the trace store, once each), :mod:`.mlflow_views`;
:mod:`.wandb_graphql` (W&B's GraphQL, on ``wandb_schema.graphql``), :mod:`.wandb_stream`
(its file stream, read), :mod:`.wandb_actions` (what they do), :mod:`.wandb_views`.
"""
