"""Bad input to the MLflow endpoints gets MLflow's JSON error (400
``INVALID_PARAMETER_VALUE``), never a 500 or a page, and writes nothing: numbers past a
double's range, text that is not Unicode (a lone UTF-16 surrogate, which JSON can spell),
experiment ids of non-ASCII digits, and names MLflow's server refuses (its rules, read in
``mlflow/utils/validation.py``).  Then a fuzz of generated MLflow requests: never a 5xx,
always JSON."""
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opdweb.runs.mlflow_views import ENDPOINTS
from tests.web.test_mlflow_endpoints import assert_refused, job_of, points

pytestmark = pytest.mark.django_db

SURROGATE = '"a\\ud800b"'  # as JSON spells it: json.dumps would escape the backslash


def unchanged(tracking, run_id):
    job = job_of(run_id)
    assert points(run_id) == [] and job.config.get("params", {}) == {} and job.name == "r1"


def test_an_integer_past_a_doubles_range_is_refused(tracking, run_id):
    raw = '{"run_id": "%s", "metrics": [{"key": "loss", "value": 1%s, "timestamp": 1, "step": 0}]}' % (
        run_id, "0" * 309)
    assert_refused(tracking.post("runs/log-batch", raw), 400, "INVALID_PARAMETER_VALUE", "must be a number")
    raw = '{"run_id": "%s", "key": "loss", "value": -1%s, "timestamp": 1, "step": 0}' % (run_id, "0" * 309)
    assert_refused(tracking.post("runs/log-metric", raw), 400, "INVALID_PARAMETER_VALUE", "must be a number")
    unchanged(tracking, run_id)


@pytest.mark.parametrize("endpoint, body", [
    ("runs/log-batch", '{"run_id": "RUN", "metrics": [{"key": %s, "value": 1, "timestamp": 1, "step": 0}]}'),
    ("runs/log-batch", '{"run_id": "RUN", "params": [{"key": %s, "value": "1"}]}'),
    ("runs/log-batch", '{"run_id": "RUN", "params": [{"key": "lr", "value": %s}]}'),
    ("runs/log-batch", '{"run_id": "RUN", "tags": [{"key": %s, "value": "1"}]}'),
    ("runs/set-tag", '{"run_id": "RUN", "key": "note", "value": %s}'),
    ("runs/log-parameter", '{"run_id": "RUN", "key": %s, "value": "1"}'),
    ("runs/update", '{"run_id": "RUN", "run_name": %s}'),
    ("runs/create", '{"experiment_id": "0", "run_name": %s}'),
    ("runs/create", '{"experiment_id": "0", "user_id": %s}'),
    ("experiments/create", '{"name": %s}'),
    ("runs/get", '{"run_id": %s}'),
])
def test_a_lone_surrogate_is_refused_anywhere(tracking, run_id, endpoint, body):
    response = tracking.post(endpoint, body.replace("RUN", run_id) % SURROGATE) if endpoint != "runs/get" else None
    if endpoint == "runs/get":  # a GET: no JSON body; the query string cannot carry one (it is UTF-8)
        response = tracking.get(endpoint, run_id="a\udc80b".encode("utf-8", "surrogateescape").decode("latin-1"))
        assert response.status_code in (400, 404) and "error_code" in response.json()
        return
    assert_refused(response, 400, "INVALID_PARAMETER_VALUE", "not valid Unicode")
    unchanged(tracking, run_id)


@pytest.mark.parametrize("experiment_id", ["²", "١", "0²", "-1", "a b"])
def test_an_experiment_id_mlflow_refuses_is_400(tracking, experiment_id):
    assert_refused(tracking.get("experiments/get", experiment_id=experiment_id), 400, "INVALID_PARAMETER_VALUE",
                   "Invalid experiment ID")
    assert_refused(tracking.post("runs/create", {"experiment_id": experiment_id}), 400, "INVALID_PARAMETER_VALUE",
                   "Invalid experiment ID")


# MLflow's own test lists (tests/utils/test_validation.py): names it refuses as metric,
# param and tag keys, for their characters or as paths that resolve to another name.
BAD_NAMES = ["a@b", "loss!", "a//b", "a/./b", "/a", "a/", "..", ".", "./", "\\", "a\nb", "x\ty"]
GOOD_NAMES = ["a", "Ab-5_", "a/b/c", "a.b.c", ".a", "b.", "a..a/._./o_O/.e.", "a b/c d", "eval:acc", "ödön"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_name_mlflow_refuses_is_refused_as_a_metric_param_or_tag_key(tracking, run_id, name):
    for field, entry, what in (("metrics", {"key": name, "value": 1.0, "timestamp": 1, "step": 0}, "metric"),
                               ("params", {"key": name, "value": "1"}, "param"),
                               ("tags", {"key": name, "value": "1"}, "tag")):
        response = tracking.post("runs/log-batch", {"run_id": run_id, field: [entry]})
        assert_refused(response, 400, "INVALID_PARAMETER_VALUE", f"invalid {what} name")
    unchanged(tracking, run_id)


def test_the_names_mlflow_takes_are_taken(tracking, run_id):
    response = tracking.post("runs/log-batch", {"run_id": run_id, "metrics": [
        {"key": name, "value": 1.0, "timestamp": 1, "step": 0} for name in GOOD_NAMES]})
    assert response.status_code == 200, response.content
    assert sorted(key for key, _, _ in points(run_id)) == sorted(GOOD_NAMES)


# -- the fuzz: requests shaped as MLflow's client makes them, with hostile values ------

# Each endpoint's fields as MLflow's client sends them (its protos), with values drawn from
# hostile ones as often as from plain ones.
FIELDS_OF = {
    "experiments/get-by-name": ["experiment_name"],
    "experiments/get": ["experiment_id"],
    "experiments/create": ["name", "tags"],
    "runs/create": ["experiment_id", "user_id", "start_time", "tags", "run_name"],
    "runs/get": ["run_id", "run_uuid"],
    "runs/update": ["run_id", "status", "end_time", "run_name"],
    "runs/log-batch": ["run_id", "metrics", "params", "tags"],
    "runs/log-metric": ["run_id", "key", "value", "timestamp", "step"],
    "runs/log-parameter": ["run_id", "key", "value"],
    "runs/set-tag": ["run_id", "key", "value"],
}
HOSTILE_TEXT = ["", "0", "²", "\ud800", "a\udfffb", "a\x00", "RUNNING", "FINISHED", "FAILED", "KILLED", "NaN",
                "-Infinity", "1" * 25, "a@b", "/a", "a//b", "..", "x" * 300, "loss", "train/loss"]
texts = st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=20))
numbers = st.one_of(st.sampled_from([2**63, -(2**63) - 1, 2**53, 10**309, -(10**309), 0, -1, 1.5]),
                    st.integers(min_value=-(10**330), max_value=10**330),
                    st.floats(allow_nan=False, allow_infinity=False))
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
metric_entries = st.fixed_dictionaries({"key": texts, "value": st.one_of(numbers, texts),
                                        "timestamp": st.one_of(numbers, texts), "step": st.one_of(numbers, texts)})
key_values = st.fixed_dictionaries({"key": texts, "value": st.one_of(texts, numbers)})
FIELD_VALUES = {
    "metrics": st.one_of(st.lists(metric_entries, max_size=3), scalars),
    "params": st.one_of(st.lists(key_values, max_size=3), scalars),
    "tags": st.one_of(st.lists(key_values, max_size=3), scalars),
    "key": texts, "value": st.one_of(numbers, texts),
}


@st.composite
def mlflow_requests(draw):
    method, name = draw(st.sampled_from(sorted(ENDPOINTS)))
    fields = draw(st.lists(st.sampled_from(FIELDS_OF.get(name, ["run_id"])), unique=True))
    body = {field: draw(FIELD_VALUES.get(field, scalars)) for field in fields}
    return method, name, body


def raw_json(body) -> str:
    """JSON as a client may send it: a lone surrogate stays a ``\\ud800`` escape."""
    return json.dumps(body, ensure_ascii=True, allow_nan=False)


@pytest.mark.fuzz
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=mlflow_requests(), use_run=st.booleans())
def test_generated_mlflow_requests_never_get_a_5xx_and_always_json(tracking, run_id, request, use_run):
    method, name, body = request
    if use_run and "run_id" in FIELDS_OF.get(name, []):
        body = {**body, "run_id": run_id}
    if method == "GET":
        query = {k: v if isinstance(v, str) else raw_json(v) for k, v in body.items()}
        query = {k: v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for k, v in query.items()}
        response = tracking.get(name, **query)
    else:
        response = tracking.post(name, raw_json(body))
    assert response.status_code < 500, (name, body, response.content)
    assert response["Content-Type"].startswith("application/json"), (name, body, response.content)
    answer = response.json()
    if response.status_code >= 400:
        assert set(answer) >= {"error_code", "message"}, answer
