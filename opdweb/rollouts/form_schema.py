"""The config form, read from the schema: one input per field of
:class:`~workers.science.config.RolloutConfig` (nested models flattened as
``sampling.temperature``), with its choices, bounds, default and help text, so the form
cannot drift from what the workers validate."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from workers.science.config import RolloutConfig


@dataclass(frozen=True)
class FormField:
    name: str  # dotted path into the config, e.g. "sampling.temperature"
    widget: str  # "select", "integer", "number", "checkbox" or "lines"
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None

    @property
    def label(self) -> str:
        return self.name.replace("_", " ").replace(".", " · ")

    @property
    def input_id(self) -> str:
        return "field-" + self.name.replace(".", "-")


def _bounds(metadata) -> tuple[float | None, float | None]:
    low = high = None
    for item in metadata:
        if isinstance(item, (annotated_types.Ge, annotated_types.Gt)):
            low = getattr(item, "ge", None) if isinstance(item, annotated_types.Ge) else item.gt
        if isinstance(item, (annotated_types.Le, annotated_types.Lt)):
            high = getattr(item, "le", None) if isinstance(item, annotated_types.Le) else item.lt
    return low, high


def _default(field) -> Any:
    if field.default_factory is not None:
        return field.default_factory()
    return None if field.default is PydanticUndefined else field.default


def _number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def _help(description: str | None, widget: str, choices, low, high, default) -> str:
    """The schema's description where it has one, then what values the field takes."""
    parts = [description.rstrip(".")] if description else []
    if widget == "select":
        parts.append("one of " + ", ".join(choices))
    elif widget in ("integer", "number"):
        kind = "a whole number" if widget == "integer" else "a number"
        if low is not None and high is not None:
            parts.append(f"{kind} from {_number(low)} to {_number(high)}")
        else:
            parts.append(kind)
    elif widget == "lines" and choices:
        parts.append("one per line, each one of " + ", ".join(choices))
    elif widget == "lines":
        parts.append("one entry per line: a layer index, a glob over module names, or re:REGEX")
    if widget != "lines":
        parts.append(f"default {str(default).lower() if isinstance(default, bool) else default}")
    return "; ".join(parts) + "."


def fields_of(model: type[BaseModel], prefix: str = "") -> list[FormField]:
    out = []
    for name, field in model.model_fields.items():
        annotation, path = field.annotation, prefix + name
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out.extend(fields_of(annotation, prefix=f"{path}."))
            continue
        default = _default(field)
        low, high = _bounds(field.metadata)
        choices: tuple[str, ...] = ()
        if get_origin(annotation) is Literal:
            widget, choices = "select", tuple(get_args(annotation))
        elif annotation is bool:
            widget = "checkbox"
        elif annotation is int:
            widget = "integer"
        elif annotation is float:
            widget = "number"
        elif get_origin(annotation) is list:
            widget = "lines"
            (item,) = get_args(annotation)
            choices = tuple(get_args(item)) if get_origin(item) is Literal else ()
        else:
            raise TypeError(f"no form input for {path}: {annotation!r}")  # a new schema field needs one
        out.append(FormField(path, widget, default, _help(field.description, widget, choices, low, high, default),
                             choices, low, high))
    return out


ROLLOUT_FIELDS = fields_of(RolloutConfig)
#: The schema's own description of the fields, as paragraphs of plain text.
SCHEMA_PARAGRAPHS = [" ".join(p.split()).replace("``", "")
                     for p in inspect.cleandoc(RolloutConfig.__doc__).split("\n\n")]


def value_at(config: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(config, dict) or part not in config:
            return None
        config = config[part]
    return config


def set_at(config: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        config = config.setdefault(part, {})
    config[last] = value
