"""The new-job form, read from each kind's JSON schema (the one the API's OpenAPI document
serves): one input per config field with its type, default and help text, a nested object
as a fieldset (an object inside it, or a list, as a small JSON box), a field naming a
checkpoint as a select of the team's registered models and an admission check's budget as
a select of the team's budgets.  What the inputs say becomes a config that goes through
the same validation as the JSON box (``check_job_config``); each problem is shown under
its input, with the input as it was sent."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel

#: Per picker ("model", "budget"), a function ``user -> {team slug: [(value, label), ...]}``
#: that offers the stored objects a field may name; the registry and budgets apps register
#: theirs (they import this app, so it imports none of theirs).
PICKERS: dict[str, Callable[[object], dict[str, list[tuple[str, str]]]]] = {}

_WHOLE = re.compile(r"^[+-]?\d{1,19}$")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d{1,3})?$")


@dataclass(frozen=True)
class ConfigInput:
    """One input of the form: ``name`` is its dotted path into the config (``rollout.weights``)."""

    name: str
    widget: str  # "integer", "number", "checkbox", "select", "text", "json", "model" or "budget"
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    nullable: bool = False
    required: bool = False
    group: str = ""  # the fieldset it is drawn in ("" at the top)

    @property
    def label(self) -> str:
        return self.name.rpartition(".")[2].replace("_", " ")

    def input_id(self, kind: str) -> str:
        return f"f-{kind}-" + self.name.replace(".", "-")


def _resolve(schema: dict, node: dict) -> dict:
    ref = node.get("$ref")
    return schema["$defs"][ref.rsplit("/", 1)[1]] if ref else node


def _types(schema: dict, node: dict) -> tuple[list[dict], bool]:
    """The alternatives of ``node`` other than null, and whether null is one."""
    options = node.get("anyOf") or [node]
    kept = [_resolve(schema, o) for o in options if o.get("type") != "null"]
    return kept, len(kept) < len(options)


def _shown_default(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return "none" if value is None else str(value)


def _input(schema: dict, name: str, node: dict, required: bool, group: str, nested: bool) -> list[ConfigInput]:
    options, nullable = _types(schema, node)
    default = node.get("default")
    description = (node.get("description") or "").strip()

    def make(widget: str, choices: tuple[str, ...] = (), extra: str = "") -> list[ConfigInput]:
        parts = [description.rstrip(".")] if description else []
        if extra:
            parts.append(extra)
        if widget == "select":
            parts.append("one of " + ", ".join(choices))
        parts.append("required" if required else f"default {_shown_default(default)}")
        return [ConfigInput(name, widget, default, "; ".join(parts) + ".", choices, nullable, required, group)]

    if node.get("sandbox") == "model":
        return make("model", extra="a registered model or a path under the model roots")
    if name == "budget" and any(o.get("type") == "integer" for o in options):
        return make("budget", extra="one of the team's budgets")
    if len(options) != 1:
        return make("json", extra="as JSON")
    only = options[0]
    if only.get("type") == "object" and "properties" in only and not nested:
        return fields_of_object(schema, only, prefix=f"{name}.", group=name)
    if "enum" in only:
        return make("select", tuple(str(c) for c in only["enum"]))
    widget = {"integer": "integer", "number": "number", "boolean": "checkbox", "string": "text"}.get(only.get("type"))
    return make(widget) if widget else make("json", extra="as JSON")


def fields_of_object(schema: dict, node: dict, prefix: str = "", group: str = "") -> list[ConfigInput]:
    """The inputs of an object of the schema; an object inside a nested one is a JSON box."""
    required = set(node.get("required", ()))
    out: list[ConfigInput] = []
    for name, prop in node["properties"].items():
        if prop.get("sandbox") == "product":
            continue  # set by the product where it runs, not by people
        out += _input(schema, prefix + name, prop, name in required, group, nested=bool(prefix))
    return out


def form_inputs(config_model: type[BaseModel]) -> list[ConfigInput]:
    """The form's inputs for a kind's config schema."""
    schema = config_model.model_json_schema()
    return fields_of_object(schema, schema)


def value_at(config: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(config, dict) or part not in config:
            return None
        config = config[part]
    return config


def _set_at(config: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        config = config.setdefault(part, {})
    config[last] = value


def shown_value(field: ConfigInput, config: dict) -> Any:
    """What the input shows for ``config`` (its default where the config says nothing)."""
    value = value_at(config, field.name)
    if value is None:
        value = field.default
    if field.widget == "checkbox":
        return bool(value)
    if value is None:
        return ""
    if field.widget == "json":
        return json.dumps(value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _typed(field: ConfigInput, raw: str) -> Any:
    """A text input's value as the schema expects it where it reads as that; as sent
    otherwise, so that the schema's own message says what is wrong."""
    if field.widget in ("integer", "budget") and _WHOLE.match(raw):
        return int(raw)
    if field.widget == "number" and _NUMBER.match(raw):
        return int(raw) if _WHOLE.match(raw) else float(raw)
    return raw


def config_from_inputs(inputs: list[ConfigInput], post) -> tuple[dict, list[dict]]:
    """The config the form's inputs describe, and the problems found before validation (a
    JSON box that is not JSON).  An empty input leaves the field to its default."""
    config: dict = {}
    problems = []
    for field in inputs:
        raw = post.get(field.name)
        if field.widget == "checkbox":
            _set_at(config, field.name, raw is not None)
            continue
        if raw is None or raw.strip() == "":
            continue
        raw = raw.strip()
        if field.widget == "json":
            try:
                _set_at(config, field.name, json.loads(raw))
            except ValueError as exc:
                problems.append({"field": field.name, "message": f"not valid JSON: {exc}"})
            continue
        _set_at(config, field.name, _typed(field, raw))
    return config, problems


def problems_by_input(inputs: list[ConfigInput], problems: list[dict]) -> tuple[dict[str, list[str]], list[dict]]:
    """Each problem under the input it belongs to (the longest input name that is its
    field or a prefix of it: ``rollout.sampling.top_p`` is the ``rollout.sampling`` box);
    the rest, which belong to no input."""
    names = sorted((f.name for f in inputs), key=len, reverse=True)
    by_input: dict[str, list[str]] = {}
    rest = []
    for problem in problems:
        where = str(problem.get("field", ""))
        owner = next((n for n in names if where == n or where.startswith(n + ".")), None)
        if owner is None:
            rest.append(problem)
            continue
        inner = where[len(owner) + 1:]
        by_input.setdefault(owner, []).append(f"{inner}: {problem['message']}" if inner else problem["message"])
    return by_input, rest


def form_rows(kind: str, inputs: list[ConfigInput], config: dict, sent=None, errors=None,
              choices: dict[str, list[tuple[str, str]]] | None = None) -> list[dict]:
    """Each input with its value (``sent``, the posted form, where given: kept as typed),
    its problems and, for a picker, its options (the value shown among them even when it
    is not one of the team's, so the form never shows another value than the one held)."""
    rows = []
    for field in inputs:
        if sent is not None:
            value: Any = sent.get(field.name) is not None if field.widget == "checkbox" else sent.get(field.name, "")
        else:
            value = shown_value(field, config)
        options: list[tuple[str, str]] = []
        if field.widget in ("model", "budget"):
            options = list((choices or {}).get(field.widget, []))
            if value and value not in {v for v, _ in options}:
                options.insert(0, (value, f"{value} (not one of the team's)"))
            options.insert(0, ("", "— choose —"))
        elif field.widget == "select":
            options = [(c, c) for c in field.choices]
            if field.nullable:
                options.insert(0, ("", "none"))
            if value not in field.choices and value != "":
                options.insert(0, (value, f"{value} (not a choice)"))
        rows.append({"field": field, "group": field.group, "id": field.input_id(kind), "value": value,
                     "options": options, "errors": (errors or {}).get(field.name, [])})
    return rows
