"""MLflow's request bodies read and checked before anything is written.

MLflow's client sends protobuf messages as JSON: int64 fields (steps, timestamps) as
numbers (or, from other clients, as strings of digits, as proto3 JSON allows), a double
that is not finite as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``.  A GET
sends its fields in the query string.  Every problem is a 400 ``INVALID_PARAMETER_VALUE``
naming the field, and a batch with one bad entry is refused whole.

Limits: MLflow's own per log-batch (1,000 metrics, 100 params, 100 tags, 1,000 in all;
keys up to 250 characters, param values 6,000, tag values 8,000), and the trace store's:
a metric key up to 200 characters (a series' key), a step from 0 to 2**53 - 1 (exact in
a browser's numbers).

Names as MLflow's server checks them (``mlflow/utils/validation.py``): a metric, param or
tag key holds only word characters, ``/``, ``.``, ``-``, space and ``:``, and must not
change when read as a path (``a//b``, ``/a``, ``a/``, ``..`` are refused); an experiment
id is ASCII letters, digits, ``_`` and ``-``.  Any text that is not Unicode (a lone UTF-16
surrogate such as ``"\\ud800"``, which JSON can spell) and any number past a double's
range (an integer literal of 10**309) are refused too.
"""
from __future__ import annotations

import json
import math
import posixpath
import re
import time
from dataclasses import dataclass

from django.conf import settings

from opdweb.runs.mlflow_errors import INVALID_PARAMETER_VALUE, MlflowRefused, invalid
from opdweb.traces.models import MAX_STEP, TraceSeries

MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_ENTITIES_PER_BATCH = 1000
MAX_KEY_LENGTH = 250
MAX_METRIC_KEY_LENGTH = TraceSeries._meta.get_field("key").max_length  # 200
MAX_PARAM_VALUE_LENGTH = 6000
MAX_TAG_VALUE_LENGTH = 8000
MAX_EXPERIMENT_NAME_LENGTH = 500
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_INT64 = re.compile(r"-?[0-9]{1,19}")
_NAME = re.compile(r"[/\w.\- :]*")  # MLflow's validate_param_and_metric_name (not on Windows)
_EXPERIMENT_ID = re.compile(r"[a-zA-Z0-9][\w\-]{0,63}", re.ASCII)  # MLflow's _EXPERIMENT_ID_REGEX


@dataclass(frozen=True)
class MetricIn:
    key: str
    value: float
    timestamp: int  # unix ms
    step: int


@dataclass(frozen=True)
class LogBatch:
    metrics: list[MetricIn]
    params: list[tuple[str, str]]
    tags: list[tuple[str, str]]


def body_of(request) -> bytes:
    """The request's body, up to ``MLFLOW_MAX_REQUEST_BYTES`` (MLflow's 1 MB, past the
    product's 256 KiB for other paths; the middleware has refused a longer declared length)."""
    limit = settings.MLFLOW_MAX_REQUEST_BYTES
    raw = request.read(limit + 1)
    if len(raw) > limit:
        raise MlflowRefused(f"request body exceeds the limit of {limit} bytes", INVALID_PARAMETER_VALUE, 413)
    return raw


def json_body(raw: bytes) -> dict:
    """The request body as a JSON object (NaN / Infinity literals are not JSON: MLflow
    sends those as strings)."""
    def refuse_constant(name):
        raise ValueError(f"{name} is not JSON (send it as the string \"{name}\")")

    try:
        data = json.loads(raw or b"{}", parse_constant=refuse_constant)
    except RecursionError:
        raise invalid("the request body is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, the constants, huge integers
        raise invalid(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise invalid("the request body must be a JSON object")
    return data


def text(data: dict, name: str, *, required: bool = True, max_length: int | None = None,
         default: str = "", where: str = "") -> str:
    at = f"{where}: " if where else ""
    value = data.get(name)
    if value is None or value == "":
        if required:
            raise invalid(f"{at}missing value for required parameter '{name}'")
        return default
    if not isinstance(value, str):
        raise invalid(f"{at}'{name}' must be a string, got {_shown(value)}")
    if "\x00" in value:
        raise invalid(f"{at}'{name}' contains a NUL character")
    if not _is_unicode(value):
        raise invalid(f"{at}'{name}' is not valid Unicode text (it holds a lone UTF-16 surrogate)")
    if max_length is not None and len(value) > max_length:
        raise invalid(f"{at}'{name}' is {len(value):,} characters long; the limit is {max_length:,}")
    return value


def _is_unicode(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def name_key(data: dict, where: str, what: str, max_length: int) -> str:
    """A metric, param or tag key, refused where MLflow's server refuses it."""
    key = text(data, "key", max_length=max_length, where=where)
    if not _NAME.fullmatch(key):
        raise invalid(f"{where}: invalid {what} name {key[:250]!r}. Names may only contain alphanumerics, "
                      "underscores (_), dashes (-), periods (.), spaces ( ), colon(:) and slashes (/).")
    normal = posixpath.normpath(key)
    if normal != key or normal == "." or normal.startswith(("..", "/")):
        raise invalid(f"{where}: invalid {what} name {key[:250]!r}. Names may be treated as files in certain "
                      f"cases, and must not resolve to other names when treated as such. This name would resolve "
                      f"to {normal[:250]!r}")
    return key


def experiment_id(data: dict, name: str = "experiment_id", **kwargs) -> str:
    """An experiment id, as MLflow's server checks it (``0`` is the default experiment)."""
    value = text(data, name, **kwargs)
    if value and not _EXPERIMENT_ID.fullmatch(value):
        raise invalid(f"Invalid experiment ID: {value[:70]!r}")
    return value


def int64(value, name: str) -> int:
    """An int64 field: a JSON integer, or a string of digits (proto3 JSON); never a
    fraction, a bool or text."""
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and _INT64.fullmatch(value))):
        raise invalid(f"'{name}' must be an integer, got {_shown(value)}")
    number = int(value)
    if not -(2**63) <= number < 2**63:
        raise invalid(f"'{name}' does not fit in 64 bits: {number}")
    return number


def run_id(data: dict) -> str:
    """``run_id``, or the older ``run_uuid`` that the client still sends beside it."""
    value = data.get("run_id") or data.get("run_uuid")
    return text({"run_id": value}, "run_id", max_length=32)


def metric(data, where: str, now_ms: int) -> MetricIn:
    if not isinstance(data, dict):
        raise invalid(f"{where} must be an object with key, value, timestamp and step")
    key = name_key(data, where, "metric", MAX_METRIC_KEY_LENGTH)
    raw = data.get("value")
    if isinstance(raw, str) and raw in NON_FINITE:
        value = NON_FINITE[raw]
    elif isinstance(raw, float) or (isinstance(raw, int) and not isinstance(raw, bool) and _fits_a_double(raw)):
        value = float(raw)
    else:
        raise invalid(f"{where} ({key!r}): 'value' must be a number (or \"NaN\", \"Infinity\", \"-Infinity\"), "
                      f"got {_shown(raw)}")
    step = int64(data.get("step", 0), f"{where}.step")
    if not 0 <= step <= MAX_STEP:
        raise invalid(f"{where} ({key!r}): step {step} is outside 0 to 2**53 - 1, the steps a trace holds")
    timestamp = int64(data["timestamp"], f"{where}.timestamp") if data.get("timestamp") is not None else now_ms
    return MetricIn(key=key, value=value, timestamp=timestamp, step=step)


def _fits_a_double(number: int) -> bool:
    try:
        float(number)
    except OverflowError:
        return False
    return True


def key_value(data, where: str, value_limit: int, what: str) -> tuple[str, str]:
    if not isinstance(data, dict):
        raise invalid(f"{where} must be an object with key and value")
    key = name_key(data, where, what, MAX_KEY_LENGTH)
    value = data.get("value")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)  # a client sending a number for a string field: MLflow keeps its text
    return key, text({"value": value}, "value", required=False, max_length=value_limit, where=f"{where} ({key!r})")


def log_batch(data: dict) -> LogBatch:
    """A ``runs/log-batch`` body, checked whole against the limits above."""
    lists = {}
    for name in ("metrics", "params", "tags"):
        items = data.get(name) or []
        if not isinstance(items, list):
            raise invalid(f"'{name}' must be a list")
        lists[name] = items
    metrics, params, tags = lists["metrics"], lists["params"], lists["tags"]
    if len(metrics) > MAX_METRICS_PER_BATCH:
        raise invalid(f"a batch holds at most {MAX_METRICS_PER_BATCH} metrics; this one has {len(metrics)}")
    for name, items in (("params", params), ("tags", tags)):
        if len(items) > MAX_PARAMS_TAGS_PER_BATCH:
            raise invalid(f"a batch holds at most {MAX_PARAMS_TAGS_PER_BATCH} {name}; this one has {len(items)}")
    if len(metrics) + len(params) + len(tags) > MAX_ENTITIES_PER_BATCH:
        raise invalid(f"a batch holds at most {MAX_ENTITIES_PER_BATCH} metrics, params and tags in all")
    now_ms = int(time.time() * 1000)
    return LogBatch(
        metrics=[metric(m, f"metrics[{i}]", now_ms) for i, m in enumerate(metrics)],
        params=[key_value(p, f"params[{i}]", MAX_PARAM_VALUE_LENGTH, "param") for i, p in enumerate(params)],
        tags=[key_value(t, f"tags[{i}]", MAX_TAG_VALUE_LENGTH, "tag") for i, t in enumerate(tags)],
    )


def strings(data: dict, name: str) -> list[str]:
    """A repeated string field (``experiment_ids``, ``order_by``): a list of strings, or absent."""
    items = data.get(name) or []
    if not isinstance(items, list) or len(items) > MAX_ENTITIES_PER_BATCH:
        raise invalid(f"'{name}' must be a list of at most {MAX_ENTITIES_PER_BATCH} strings")
    return [text({name: item}, name, max_length=MAX_TAG_VALUE_LENGTH) for item in items]


def tags(data: dict, name: str = "tags") -> list[tuple[str, str]]:
    items = data.get(name) or []
    if not isinstance(items, list):
        raise invalid(f"'{name}' must be a list")
    if len(items) > MAX_PARAMS_TAGS_PER_BATCH:
        raise invalid(f"at most {MAX_PARAMS_TAGS_PER_BATCH} tags at once; got {len(items)}")
    return [key_value(t, f"{name}[{i}]", MAX_TAG_VALUE_LENGTH, "tag") for i, t in enumerate(items)]


def _shown(value) -> str:
    shown = json.dumps(value) if not isinstance(value, str) else repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."
