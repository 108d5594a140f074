"""MLflow's search language for runs and experiments, read as MLflow's own server reads it
(``mlflow.utils.search_utils.SearchUtils``), without importing MLflow: the web process
keeps its startup small and ``mlflow`` is only a test dependency.  The tests hold this
parser to MLflow's own on a list of filters, accepted and refused alike.

A filter is comparisons joined by ``AND``: ``metrics.loss < 0.5 AND params.lr = '1e-6'``.
An identifier is ``<type>.<key>`` (``metric(s)``, ``param(s)``/``parameter(s)``,
``tag(s)``, ``attribute(s)``/``attr``/``run``; a bare key is an attribute), a key with
other characters quoted in backticks or double quotes (``metrics.`train/loss```).  Metrics
compare with ``= != < <= > >=`` against a number; params and tags with ``= != LIKE ILIKE``
against a quoted string, or ``IS [NOT] NULL``; attributes by their kind (``run_id`` also
``IN ('a', 'b')``).  ``order_by`` is ``<identifier> [ASC|DESC]``; runs come in MLflow's
order (newest start first, then run id) with a missing value last either way.  A page
token is MLflow's: base64 of ``{"offset": n}``.
"""
from __future__ import annotations

import base64
import binascii
import json
import math
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opdweb.runs.mlflow_errors import invalid

METRIC, PARAM, TAG, ATTRIBUTE = "metric", "parameter", "tag", "attribute"
_TYPES = {"metric": METRIC, "metrics": METRIC, "parameter": PARAM, "parameters": PARAM, "param": PARAM,
          "params": PARAM, "tag": TAG, "tags": TAG, "attribute": ATTRIBUTE, "attributes": ATTRIBUTE,
          "attr": ATTRIBUTE, "run": ATTRIBUTE}
RUN_TYPES = frozenset(_TYPES)
EXPERIMENT_TYPES = frozenset({"attribute", "attributes", "tag", "tags"})
_ALIASES = {"created": "start_time", "Created": "start_time", "run name": "run_name", "Run name": "run_name",
            "Run Name": "run_name"}
#: MLflow's ``RunInfo`` searchable attributes, and its alternate names.
RUN_ATTRIBUTES = frozenset({"artifact_uri", "end_time", "run_id", "run_name", "start_time", "status", "user_id"})
RUN_NUMERIC_ATTRIBUTES = frozenset({"start_time", "end_time", "created", "Created"})
RUN_SEARCH_ATTRIBUTES = RUN_ATTRIBUTES | {"created", "Created", "run name", "Run name", "Run Name"}
RUN_ORDER_ATTRIBUTES = RUN_ATTRIBUTES | {"created", "Created"}
#: ``SearchExperimentsUtils``: an experiment's attributes.
EXPERIMENT_ATTRIBUTES = frozenset({"name", "experiment_id", "creation_time", "last_update_time"})
EXPERIMENT_NUMERIC_ATTRIBUTES = frozenset({"creation_time", "last_update_time"})

NUMBER_COMPARATORS = frozenset({">", ">=", "!=", "=", "<", "<="})
STRING_COMPARATORS = frozenset({"!=", "=", "LIKE", "ILIKE", "IS NULL", "IS NOT NULL"})
STRING_ATTRIBUTE_COMPARATORS = frozenset({"!=", "=", "LIKE", "ILIKE", "IN", "NOT IN"})

MAX_RESULTS_DEFAULT = 1000  # mlflow.store.tracking.SEARCH_MAX_RESULTS_DEFAULT
MAX_RESULTS_LIMIT = 50000  # SEARCH_MAX_RESULTS_THRESHOLD
MAX_EXPERIMENTS_LIMIT = 50000
MAX_HISTORY_LIMIT = 1_000_000  # MLflow sets none; its client asks for 25,000 a page

_NAME = r"(?:[A-Za-z_][\w$]*|`[^`]*`|\"[^\"]*\")"
_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.]))
  | (?P<string>'(?:[^']|'')*')
  | (?P<list>\((?:\s*(?:'(?:[^']|'')*'|"[^"]*")\s*,)*\s*(?:'(?:[^']|'')*'|"[^"]*")\s*,?\s*\))
  | (?P<null>IS\s+NOT\s+NULL|IS\s+NULL)(?!\w)
  | (?P<keyword>NOT\s+IN|AND|LIKE|ILIKE|IN)(?!\w)
  | (?P<comparator>>=|<=|!=|<>|=|<|>)
  | (?P<identifier>""" + _NAME + r"(?:\." + _NAME + r""")*)
""", re.VERBOSE | re.IGNORECASE)


@dataclass(frozen=True)
class Comparison:
    type: str  # METRIC, PARAM, TAG or ATTRIBUTE
    key: str
    comparator: str  # upper case
    value: Any  # a float for a metric, an int for a numeric attribute, a str, a tuple for IN, None for IS NULL


@dataclass(frozen=True)
class OrderBy:
    type: str
    key: str
    ascending: bool


@dataclass
class Searched:
    """A run (or an experiment) as a search reads it: its attributes, latest metrics, params, tags."""

    info: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    payload: Any = None  # what the caller answers with for this run

    def value(self, kind: str, key: str):
        if kind == METRIC:
            return self.metrics.get(key)
        if kind == PARAM:
            return self.params.get(key)
        if kind == TAG:
            return self.tags.get(key)
        return self.info.get(key)


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens, at = [], 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            raise invalid(f"Invalid clause(s) in filter string: {text[at:at + 40]!r} cannot be read")
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append((kind, match.group()))
        at = match.end()
    return tokens


def _unquote(name: str) -> str:
    if len(name) >= 2 and name[0] == name[-1] and name[0] in "'\"":
        name = name[1:-1]
    if len(name) >= 2 and name[0] == name[-1] == "`":
        name = name[1:-1]
    return name


def identifier(text: str, attributes: Iterable[str], types: Iterable[str] = RUN_TYPES) -> tuple[str, str]:
    """``(type, key)`` of ``metrics.loss``, ``tags."a b"``, ``run_name``, as MLflow splits them."""
    kind, dot, key = text.partition(".")
    if not dot:
        kind, key = ATTRIBUTE, text
    else:
        name = kind[1:-1] if len(kind) >= 2 and kind[0] == kind[-1] == "`" else kind
        if name not in types:
            raise invalid(f"Invalid entity type '{name}'. Valid values are {sorted(types)}")
        kind = _TYPES[name]
    key = _unquote(key)
    if kind == ATTRIBUTE and key not in attributes:
        raise invalid(f"Invalid attribute key '{key}' specified. Valid keys are '{sorted(attributes)}'")
    return kind, key


def parse_filter(text: str, *, attributes: frozenset[str] = RUN_SEARCH_ATTRIBUTES,
                 numeric: frozenset[str] = RUN_NUMERIC_ATTRIBUTES, types: frozenset[str] = RUN_TYPES,
                 listed: str = "run_id") -> list[Comparison]:
    """The comparisons of a filter string, every one checked; a 400 naming what is wrong."""
    if not text or not text.strip():
        return []
    tokens = _tokens(text)
    clauses: list[list[tuple[str, str]]] = [[]]
    for kind, value in tokens:
        if kind == "keyword" and value.upper() == "AND":
            clauses.append([])
        else:
            clauses[-1].append((kind, value))
    # MLflow skips a bare AND (``metrics.loss = 1 AND`` is one comparison to its parser too).
    return [_comparison(clause, text, attributes, numeric, types, listed) for clause in clauses if clause]


def _comparison(clause: list[tuple[str, str]], text: str, attributes: frozenset[str],
                numeric: frozenset[str], types: frozenset[str], listed: str) -> Comparison:
    shown = " ".join(v for _, v in clause) or "(nothing)"
    if len(clause) == 2 and clause[0][0] == "identifier" and clause[1][0] == "null":
        kind, key = identifier(clause[0][1], attributes, types)
        if kind not in (TAG, PARAM):
            raise invalid(f"IS NULL / IS NOT NULL is only supported for tags and params, not for '{kind}' '{key}'")
        return Comparison(kind, key, " ".join(clause[1][1].upper().split()), None)
    if len(clause) != 3 or clause[0][0] != "identifier" or clause[1][0] not in ("comparator", "keyword"):
        raise invalid(f"Invalid clause(s) in filter string: '{shown}' (in {text[:200]!r}); a clause is "
                      "<type>.<key> <comparator> <value>, clauses joined by AND")
    kind, key = identifier(clause[0][1], attributes, types)
    key = _ALIASES.get(key, key)
    comparator = " ".join(clause[1][1].upper().split())
    value_kind, raw = clause[2]
    if kind == METRIC:
        _check(comparator, NUMBER_COMPARATORS, "metric")
        if value_kind != "number":
            raise invalid(f"Expected numeric value type for metric. Found {raw}")
        return Comparison(kind, key, comparator, float(raw))
    if kind in (PARAM, TAG):
        _check(comparator, STRING_COMPARATORS, kind)
        return Comparison(kind, key, comparator, _quoted(raw, value_kind, kind))
    if key in numeric:
        _check(comparator, NUMBER_COMPARATORS, f"numeric attribute {key}")
        if value_kind != "number":
            raise invalid(f"Expected numeric value type for numeric attribute: {key}. Found {raw}")
        number = float(raw)
        return Comparison(kind, key, comparator, int(raw) if re.fullmatch(r"-?\d+", raw) else number)
    _check(comparator, STRING_ATTRIBUTE_COMPARATORS, f"string attribute {key}")
    if value_kind == "list":
        if key != listed:
            raise invalid(f"Only ['{listed}'] attributes support comparison with a list of quoted string values.")
        items = re.findall(r"'((?:[^']|'')*)'|\"([^\"]*)\"", raw)
        return Comparison(kind, key, comparator, tuple(a or b for a, b in items))
    if comparator in ("IN", "NOT IN"):
        raise invalid(f"'{comparator}' takes a list of quoted strings, e.g. ('a', 'b'); got {raw}")
    return Comparison(kind, key, comparator, _quoted(raw, value_kind, "attributes"))


def _check(comparator: str, allowed: frozenset[str], what: str) -> None:
    if comparator not in allowed:
        raise invalid(f"Invalid comparator '{comparator}' for {what}, not one of {sorted(allowed)}")


def _quoted(raw: str, value_kind: str, what: str) -> str:
    if value_kind == "string" or (value_kind == "identifier" and len(raw) >= 2 and raw[0] == raw[-1] == '"'):
        return raw[1:-1]
    raise invalid(f"Expected a quoted string value for {what} (e.g. 'my-value'). Got value {raw}")


def _like(pattern: str, flags: int = 0) -> Callable[[str], bool]:
    regex = re.escape(pattern).replace("%", ".*").replace("_", ".")
    regex = ("" if pattern.startswith("%") else "^") + regex + ("" if pattern.endswith("%") else "$")
    compiled = re.compile(regex, flags)
    return lambda text: compiled.match(text) is not None


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt, ">=": operator.ge, "=": operator.eq, "!=": operator.ne,
    "<=": operator.le, "<": operator.lt, "LIKE": lambda x, p: _like(p)(x),
    "ILIKE": lambda x, p: _like(p, re.IGNORECASE)(x), "IN": lambda x, y: x in y,
    "NOT IN": lambda x, y: x not in y}


def matches(run: Searched, comparisons: Sequence[Comparison]) -> bool:
    """MLflow's ``_does_run_match_clause`` for each comparison, all of them."""
    for c in comparisons:
        value = run.value(c.type, c.key)
        if c.comparator in ("IS NULL", "IS NOT NULL"):
            if (value is None) != (c.comparator == "IS NULL"):
                return False
            continue
        if value is None or not _OPERATORS[c.comparator](value, c.value):
            return False
    return True


def parse_order_by(clauses: Sequence[str], attributes: frozenset[str] = RUN_ORDER_ATTRIBUTES,
                   types: frozenset[str] = RUN_TYPES) -> list[OrderBy]:
    orders = []
    for clause in clauses:
        if not isinstance(clause, str):
            raise invalid(f"'order_by' holds strings such as 'metrics.loss DESC', got {clause!r}")
        words = re.fullmatch(r"\s*(" + _NAME + r"(?:\." + _NAME + r")*|[\w.]+)(?:\s+(\w+))?\s*", clause)
        if words is None:
            raise invalid(f"Invalid order_by clause '{clause}'. Could not be parsed.")
        direction = (words.group(2) or "asc").lower()
        if direction not in ("asc", "desc"):
            raise invalid(f"Invalid ordering key in order_by clause '{clause}'.")
        kind, key = identifier(words.group(1), attributes, types)
        orders.append(OrderBy(kind, _ALIASES.get(key, key), direction == "asc"))
    return orders


def _sort_key(value, ascending: bool):
    """MLflow's ``_get_value_for_sort``: a missing value (and NaN) last, either direction."""
    missing = value is None or (isinstance(value, float) and math.isnan(value))
    if value is None:
        value = (1 if ascending else -1) * math.inf
    elif missing:
        value = (-1 if ascending else 1) * math.inf
    return (missing, value) if ascending else (not missing, value)


def sort_runs(runs: list[Searched], orders: Sequence[OrderBy]) -> list[Searched]:
    """Newest start first, then run id; each ``order_by`` applied over that, last first."""
    return sort(sorted(runs, key=lambda r: (-r.info["start_time"], r.info["run_id"])), orders)


def sort(runs: list[Searched], orders: Sequence[OrderBy]) -> list[Searched]:
    """Each ``order_by`` applied in turn, last first (a stable sort keeps the earlier order)."""
    for order in reversed(orders):
        runs = sorted(runs, key=lambda r, o=order: _sort_key(r.value(o.type, o.key), o.ascending),
                      reverse=not order.ascending)
    return runs


def offset_of(page_token: str) -> int:
    """The offset a page token holds (MLflow's own token: base64 of ``{"offset": n}``)."""
    if not page_token:
        return 0
    try:
        decoded = base64.b64decode(page_token, validate=True)
        offset = json.loads(decoded)["offset"]
    except (binascii.Error, ValueError, TypeError, KeyError):
        raise invalid(f"Invalid page token {page_token[:80]!r}: pass on the next_page_token of the previous "
                      "answer unchanged") from None
    if isinstance(offset, bool) or not isinstance(offset, int) or offset <= 0:
        raise invalid(f"Invalid page token {page_token[:80]!r}: its offset must be a positive integer")
    return offset


def page_token(offset: int) -> str:
    return base64.b64encode(json.dumps({"offset": offset}).encode()).decode()


def page(items: list, token: str, max_results: int) -> tuple[list, str | None]:
    """``items[offset:offset + max_results]`` and the token of the next page, if any."""
    start = offset_of(token)
    end = start + max_results
    return items[start:end], (page_token(end) if end < len(items) else None)


def max_results(value, *, default: int = MAX_RESULTS_DEFAULT, limit: int = MAX_RESULTS_LIMIT) -> int:
    if value is None or value == "":
        return default
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.isdigit())):
        raise invalid(f"'max_results' must be a positive integer, got {value!r}")
    number = int(value)
    if not 1 <= number <= limit:
        raise invalid(f"Invalid value {number} for parameter 'max_results' supplied. It must be a positive "
                      f"integer, at most {limit}")
    return number
