"""The product's reading of MLflow's search language (``opdweb.runs.mlflow_search``) held to
MLflow's own parser (``mlflow.utils.search_utils.SearchUtils``, from the installed client):
every filter below is accepted by both with the same comparisons, or refused by both; and
the order and the page tokens are MLflow's."""
from __future__ import annotations

import base64
import json

import pytest

from opdweb.runs import mlflow_search as search
from opdweb.runs.mlflow_errors import MlflowRefused

FILTERS = [
    "",
    "metrics.loss < 0.5",
    "metric.loss >= 1e-3",
    "metrics.`train/loss` <= 2",
    'metrics."rollout_corr/k3_kl" > -0.25',
    "metrics.loss != 3 and params.lr = '1e-6'",
    "params.lr = '1e-6' AND tags.team LIKE 'opd%' AND tags.x ILIKE '%A_'",
    "param.lr != \"x\"",
    "parameters.`rollout.quantization` = 'fp8'",
    "tags.`mlflow.runName` = 'fp8-kv run'",
    "tags.mlflow.runName = 'fp8-kv run'",
    "tags.missing IS NULL",
    "params.lr is not null",
    "attributes.status = 'FINISHED'",
    "attribute.run_name LIKE 'fp8%'",
    "run_name = 'a'",
    "attributes.start_time > 1700000000000",
    "attr.end_time <= 1.5",
    "created >= 5",
    "`Run name` = 'x'",
    "run.user_id != 'bob'",
    "attributes.run_id IN ('0123', '4567')",
    "attributes.run_id NOT IN ('0123')",
    # refused by both
    "metrics.loss < 'a'",
    "metrics.loss LIKE 3",
    "params.lr = 5",
    "params.lr > '1'",
    "tags.t = unquoted",
    "attributes.status IN ('A')",
    "attributes.start_time = 'a'",
    "attributes.nope = 'a'",
    "metrics.loss IS NULL",
    "foo.bar = 1",
    "metrics.loss < 1 OR metrics.loss > 2",
    "metrics.loss <",
    "metrics.loss",
    "metrics.loss = 1 AND",
    "metrics.loss = 1 AND AND params.a = 'b'",
    "= 1",
    "metrics.loss <> 1",
    "metrics.loss = 1; DROP TABLE runs",
]


def mlflow_parsed(text: str):
    """MLflow's comparisons, or "refused" where it refuses the filter: when parsing it, or
    (a comparator a type does not take) when matching a run against each comparison."""
    from mlflow.entities import Run, RunData, RunInfo
    from mlflow.exceptions import MlflowException
    from mlflow.utils.search_utils import SearchUtils

    run = Run(RunInfo(run_id="0" * 32, experiment_id="1", user_id="u", status="RUNNING", start_time=1,
                      end_time=2, lifecycle_stage="active", run_name="r"), RunData())
    try:
        parsed = SearchUtils.parse_search_filter(text)
        for comparison in parsed:
            SearchUtils._does_run_match_clause(run, comparison)
    except MlflowException as exc:
        assert exc.error_code == "INVALID_PARAMETER_VALUE", exc
        return "refused"
    out = []
    for c in parsed:
        value = c["value"]
        if c["type"] == "metric":
            value = float(value)
        elif isinstance(value, (list, tuple)):
            value = tuple(value)
        out.append((c["type"], SearchUtils.translate_key_alias(c["key"]), c["comparator"].upper(), value))
    return out


def ours(text: str):
    try:
        parsed = search.parse_filter(text)
    except MlflowRefused as exc:
        assert exc.status == 400 and exc.code == "INVALID_PARAMETER_VALUE", exc
        return "refused"
    return [(c.type, c.key, c.comparator, c.value) for c in parsed]


@pytest.mark.parametrize("text", FILTERS)
def test_it_reads_a_filter_as_mlflows_own_parser_does(text):
    assert ours(text) == mlflow_parsed(text)


EXPERIMENT_FILTERS = ["name = 'notebook'", "name LIKE 'note%'", "attribute.name ILIKE '%BOOK'", "tags.project = 'opd'",
                      "tags.`a b` IS NULL", "creation_time > 5", "experiment_id IN ('1', '2')",
                      "name = 'a' AND tags.t != 'b'", "params.lr = 'x'", "metrics.loss < 1", "name IS NULL",
                      "run_name = 'x'", "name = 5", "creation_time = 'x'"]


@pytest.mark.parametrize("text", EXPERIMENT_FILTERS)
def test_it_reads_an_experiment_filter_as_mlflows_own_parser_does(text):
    from mlflow.exceptions import MlflowException
    from mlflow.utils.search_utils import SearchExperimentsUtils

    try:
        expected = [(c["type"], c["key"], c["comparator"].upper(), tuple(c["value"])
                     if isinstance(c["value"], (list, tuple)) else c["value"])
                    for c in SearchExperimentsUtils.parse_search_filter(text)]
    except MlflowException:
        expected = "refused"
    try:
        got = [(c.type, c.key, c.comparator, c.value) for c in search.parse_filter(
            text, attributes=search.EXPERIMENT_ATTRIBUTES, numeric=search.EXPERIMENT_NUMERIC_ATTRIBUTES,
            types=search.EXPERIMENT_TYPES, listed="experiment_id")]
    except MlflowRefused:
        got = "refused"
    assert got == expected


ORDERS = ["metrics.loss", "metrics.loss DESC", "metrics.`train/loss` asc", "params.lr desc", "tags.`a b` ASC",
          "attributes.start_time DESC", "start_time", "created", "run_name desc", "metrics.loss sideways",
          "attributes.nope", "foo.x", "metrics.loss DESC extra"]


@pytest.mark.parametrize("clause", ORDERS)
def test_it_reads_an_order_by_clause_as_mlflow_does(clause):
    from mlflow.exceptions import MlflowException
    from mlflow.utils.search_utils import SearchUtils

    try:
        kind, key, ascending = SearchUtils.parse_order_by_for_search_runs(clause)
        expected = (kind, SearchUtils.translate_key_alias(key), ascending)
    except MlflowException:
        expected = "refused"
    try:
        [order] = search.parse_order_by([clause])
        got = (order.type, order.key, order.ascending)
    except MlflowRefused:
        got = "refused"
    assert got == expected


def test_it_sorts_and_pages_runs_as_mlflows_search_utils_does():
    """The same runs through MLflow's ``SearchUtils.filter``/``sort``/``paginate`` (on its own
    ``Run`` entities) and through ours: the same run ids, page by page, with the same tokens."""
    from mlflow.entities import Metric, Param, Run, RunData, RunInfo, RunTag
    from mlflow.utils.search_utils import SearchUtils

    nan = float("nan")
    rows = [("a" * 32, 5, {"loss": 0.3}, {"lr": "1"}), ("b" * 32, 5, {"loss": 0.1}, {"lr": "2"}),
            ("c" * 32, 9, {"loss": nan}, {}), ("d" * 32, 7, {}, {"lr": "1"}), ("e" * 32, 1, {"loss": 0.1}, {})]
    theirs, mine = [], []
    for run_id, start, metrics, params in rows:
        info = RunInfo(run_id=run_id, experiment_id="1", user_id="u", status="FINISHED", start_time=start,
                       end_time=None, lifecycle_stage="active", run_name=run_id[:3])
        theirs.append(Run(info, RunData(metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
                                        params=[Param(k, v) for k, v in params.items()], tags=[RunTag("t", "x")])))
        mine.append(search.Searched(info={"run_id": run_id, "start_time": start, "end_time": None,
                                          "status": "FINISHED", "run_name": run_id[:3], "user_id": "u"},
                                    metrics=metrics, params=params, tags={"t": "x"}))
    cases = [("", []), ("", ["metrics.loss ASC"]), ("", ["metrics.loss DESC", "params.lr"]),
             ("metrics.loss < 1", ["attributes.start_time"]), ("params.lr = '1'", []),
             ("tags.t = 'x'", ["run_name DESC"])]
    for text, order_by in cases:
        expected_runs = SearchUtils.sort(SearchUtils.filter(theirs, text), order_by)
        got_runs = search.sort_runs([r for r in mine if search.matches(r, search.parse_filter(text))],
                                    search.parse_order_by(order_by))
        token_theirs, token_mine = None, ""
        while True:
            page_theirs, token_theirs = SearchUtils.paginate(expected_runs, token_theirs, 2)
            page_mine, next_mine = search.page(got_runs, token_mine, 2)
            assert [r.info.run_id for r in page_theirs] == [r.info["run_id"] for r in page_mine], (text, order_by)
            assert (token_theirs.decode() if token_theirs else None) == next_mine
            if next_mine is None:
                break
            token_mine = next_mine


@pytest.mark.parametrize("token", ["not base64!", base64.b64encode(b"not json").decode(),
                                   base64.b64encode(json.dumps({"offset": "x"}).encode()).decode(),
                                   base64.b64encode(json.dumps({"offset": -2}).encode()).decode(),
                                   base64.b64encode(json.dumps([1]).encode()).decode()])
def test_a_bad_page_token_is_a_400(token):
    with pytest.raises(MlflowRefused) as refused:
        search.offset_of(token)
    assert refused.value.status == 400 and refused.value.code == "INVALID_PARAMETER_VALUE"
