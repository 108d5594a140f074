"""MLflow's REST tracking endpoints under ``/mlflow/``: a trainer's MLflow logger reports
here with ``MLFLOW_TRACKING_URI=<opdweb>/mlflow`` and ``MLFLOW_TRACKING_TOKEN=<an API
token>`` (sent as ``Authorization: Bearer``).  Thin: each view reads its fields and calls
:mod:`.actions`.  Every answer is MLflow's JSON, refusals in its error shape; an endpoint
MLflow has and this does not is ``ENDPOINT_NOT_FOUND`` (404), which the client treats as
an older server."""
from __future__ import annotations

import logging
from typing import Callable

from django.db import InterfaceError, OperationalError
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from opdweb.refusals import RETRY_AFTER_OUTAGE, Refused
from opdweb.runs import actions
from opdweb.runs import mlflow_artifacts as artifacts
from opdweb.runs import mlflow_reads as reads
from opdweb.runs import mlflow_requests as read
from opdweb.runs import mlflow_search as search
from opdweb.runs import mlflow_shapes as shapes
from opdweb.runs.mlflow_errors import ENDPOINT_NOT_FOUND, MlflowRefused, mlflow_error
from opdweb.tokens.authentication import bearer_token, check_write, unauthenticated
from opdweb.tokens.models import ApiToken
from workers.science.checkpoints.files import StoreUnavailable

log = logging.getLogger(__name__)

PREFIX = "api/2.0/mlflow/"
Handler = Callable[[ApiToken, dict], dict]
ENDPOINTS: dict[tuple[str, str], Handler] = {}
#: POST endpoints that only read (MLflow posts a search's body): a read-only token may call them.
READS: set[tuple[str, str]] = set()


def endpoint(method: str, name: str, *, reads: bool = False):
    def register(handler: Handler) -> Handler:
        ENDPOINTS[(method, name)] = handler
        if reads:
            READS.add((method, name))
        return handler

    return register


@endpoint("GET", "experiments/get-by-name")
def get_experiment_by_name(token, data):
    name = read.text(data, "experiment_name", max_length=read.MAX_EXPERIMENT_NAME_LENGTH)
    return {"experiment": shapes.experiment(actions.experiment_by_name(token, name))}


@endpoint("GET", "experiments/get")
def get_experiment(token, data):
    return {"experiment": shapes.experiment(actions.experiment_by_id(token, read.experiment_id(data)))}


@endpoint("POST", "experiments/search", reads=True)
def search_experiments(token, data):
    experiments, next_token = reads.search_experiments(
        token, read.text(data, "filter", required=False), read.strings(data, "order_by"),
        search.max_results(data.get("max_results"), limit=search.MAX_EXPERIMENTS_LIMIT),
        read.text(data, "page_token", required=False))
    return _paged({"experiments": experiments}, next_token)


@endpoint("POST", "experiments/create")
def create_experiment(token, data):
    name = read.text(data, "name", max_length=read.MAX_EXPERIMENT_NAME_LENGTH)
    exp = actions.do_create_experiment(token, name, read.tags(data))
    return {"experiment_id": str(exp.pk)}


@endpoint("POST", "runs/create")
def create_run(token, data):
    start_time = read.int64(data["start_time"], "start_time") if data.get("start_time") is not None else None
    run = actions.do_start_run(token, experiment_id=read.experiment_id(data, required=False, default="0"),
                               user_id=read.text(data, "user_id", required=False, max_length=255),
                               start_time=start_time, tags=read.tags(data),
                               run_name=read.text(data, "run_name", required=False, max_length=250))
    return {"run": shapes.run(run)}


@endpoint("GET", "runs/get")
def get_run(token, data):
    return {"run": shapes.run(actions.run_for(token, read.run_id(data)))}


@endpoint("POST", "runs/search", reads=True)
def search_runs(token, data):
    experiment_ids = [read.experiment_id({"id": e}, "id") for e in read.strings(data, "experiment_ids")]
    runs, next_token = reads.search_runs(token, experiment_ids, read.text(data, "filter", required=False),
                                         read.strings(data, "order_by"), search.max_results(data.get("max_results")),
                                         read.text(data, "page_token", required=False))
    return _paged({"runs": runs}, next_token)


@endpoint("GET", "metrics/get-history")
def get_metric_history(token, data):
    limit = data.get("max_results")
    metrics, next_token = reads.metric_history(
        token, read.run_id(data), read.text(data, "metric_key", max_length=read.MAX_KEY_LENGTH),
        None if limit is None else search.max_results(limit, limit=search.MAX_HISTORY_LIMIT),
        read.text(data, "page_token", required=False))
    return _paged({"metrics": metrics}, next_token)


@endpoint("POST", "logged-models/search", reads=True)
def search_logged_models(token, data):
    """No logged models are kept here (a run's files are its artifacts): an empty page.  The
    client asks before listing a folder of a run's artifacts, in case a model of that name
    has files of its own."""
    for experiment_id in read.strings(data, "experiment_ids"):
        actions.experiment_by_id(token, read.experiment_id({"id": experiment_id}, "id"))
    return {}


def _paged(answer: dict, next_token: str | None) -> dict:
    """MLflow leaves an empty list and a missing token out of its answer."""
    answer = {k: v for k, v in answer.items() if v}
    return {**answer, "next_page_token": next_token} if next_token else answer


@endpoint("POST", "runs/update")
def update_run(token, data):
    end_time = read.int64(data["end_time"], "end_time") if data.get("end_time") is not None else None
    run = actions.do_update_run(token, read.run_id(data), status=actions.check_status(read.text(
        data, "status", required=False)), end_time=end_time,
        run_name=read.text(data, "run_name", required=False, max_length=250))
    return {"run_info": shapes.run_info(run)}


@endpoint("POST", "runs/log-batch")
def log_batch(token, data):
    actions.do_log_batch(token, read.run_id(data), read.log_batch(data))
    return {}


@endpoint("POST", "runs/log-metric")
def log_metric(token, data):
    metric = {k: data.get(k) for k in ("key", "value", "timestamp", "step")}
    actions.do_log_batch(token, read.run_id(data), read.log_batch({"metrics": [metric]}))
    return {}


@endpoint("POST", "runs/log-parameter")
def log_parameter(token, data):
    param = {k: data.get(k) for k in ("key", "value")}
    actions.do_log_batch(token, read.run_id(data), read.log_batch({"params": [param]}))
    return {}


@endpoint("POST", "runs/set-tag")
def set_tag(token, data):
    tag = {k: data.get(k) for k in ("key", "value")}
    actions.do_log_batch(token, read.run_id(data), read.log_batch({"tags": [tag]}))
    return {}


@csrf_exempt  # a bearer token, never a session: nothing a browser could forge
def dispatch(request, path: str):
    try:
        if path == artifacts.PATH or path.startswith(artifacts.PATH + "/"):
            return artifacts.answer(request, path[len(artifacts.PATH):].lstrip("/"), _token(request))
        if path.startswith(artifacts.MULTIPART):
            return artifacts.multipart(request, _token(request))
        return JsonResponse(_answer(request, path))
    except Refused as exc:
        return mlflow_error(exc)
    except StoreUnavailable as exc:
        log.warning("mlflow %s %s: %s", request.method, path, exc)
        return mlflow_error(Refused("the artifact store is unreachable; nothing was changed, try again in a moment",
                                    status=503, headers=RETRY_AFTER_OUTAGE))
    except (OperationalError, InterfaceError):
        log.warning("mlflow %s %s: database unreachable", request.method, path, exc_info=True)
        return mlflow_error(Refused("the database is unreachable; nothing was changed, try again in a moment",
                                    status=503, headers=RETRY_AFTER_OUTAGE))


def _answer(request, path: str) -> dict:
    name = path.removeprefix(PREFIX)
    handler = ENDPOINTS.get((request.method, name)) if path.startswith(PREFIX) else None
    if handler is None:
        methods = [m for (m, n) in ENDPOINTS if n == name]
        if methods and path.startswith(PREFIX):
            raise MlflowRefused(f"{request.method} /mlflow/{path} is not allowed; use {', '.join(methods)}",
                                ENDPOINT_NOT_FOUND, 405)
        log.info("mlflow endpoint not served: %s /mlflow/%s", request.method, path)
        raise MlflowRefused(f"opdweb does not serve the MLflow endpoint {request.method} /mlflow/{path} (it keeps "
                            "runs, params, tags, metrics and artifacts)", ENDPOINT_NOT_FOUND, 404)
    token = _token(request)
    if request.method == "GET":
        data = {k: request.GET.get(k) for k in request.GET}
    else:
        if (request.method, name) not in READS:
            check_write(token)
        data = read.json_body(read.body_of(request))
    return handler(token, data)


def _token(request) -> ApiToken:
    token = bearer_token(request)
    if token is None:
        raise unauthenticated("send an opdweb API token as 'Authorization: Bearer opd_...' (for MLflow's client: "
                              "MLFLOW_TRACKING_TOKEN); make one on /tokens/")
    return token
