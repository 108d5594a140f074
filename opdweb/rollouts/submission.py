"""What a person submits as a rollout config (the form's inputs, pasted or uploaded YAML)
turned into the canonical config, or refused with one plain sentence per field."""
from __future__ import annotations

import difflib

import yaml
from django.conf import settings
from pydantic import BaseModel

from opdweb.api import check_storable
from opdweb.refusals import Refused
from opdweb.rollouts.canonical import ValidationError, canonical_rollout, config_hash
from opdweb.rollouts.form_schema import ROLLOUT_FIELDS, set_at
from workers.science.config import RolloutConfig


def config_from_form(post) -> dict:
    """The config the form's inputs describe.  Values are passed on as typed, so the schema
    (not this function) judges them; an empty number means the default."""
    config: dict = {}
    for field in ROLLOUT_FIELDS:
        raw = post.get(field.name)
        if field.widget == "checkbox":
            set_at(config, field.name, raw is not None)
        elif field.widget == "lines":
            lines = [line.strip() for line in (raw or "").splitlines() if line.strip()]
            set_at(config, field.name, [int(line) if line.isdigit() else line for line in lines])
        elif raw is not None and raw.strip() != "":
            set_at(config, field.name, raw.strip())
    return config


class _LoaderWithoutAliases(yaml.SafeLoader):
    """YAML without anchors and aliases: a few lines of aliases can expand to billions of
    nodes (the "billion laughs"), and a config has no use for them."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("anchors and aliases (&name, *name) are not accepted in a rollout config")
        return super().compose_node(parent, index)


def config_from_yaml(text: str) -> dict:
    """A YAML mapping, or a 400 (a 413 past the size limit) saying what is wrong with it."""
    limit = settings.JOB_CONFIG_MAX_BYTES
    if len(text.encode()) > limit:
        raise Refused(f"the YAML is {len(text.encode()):,} bytes; a rollout config may be at most {limit:,}",
                      status=413)
    try:
        data = yaml.load(text, Loader=_LoaderWithoutAliases)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise Refused(f"the YAML cannot be read: {exc}") from None
    except RecursionError:
        raise Refused("the YAML is nested too deeply to be a rollout config") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise Refused(f"the YAML must be a mapping of field: value, not a {type(data).__name__}")
    check_storable(data, "the YAML")
    return data


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The schema class that holds the field at ``loc`` (for the names it knows)."""
    model: type[BaseModel] = RolloutConfig
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _plain(err: dict) -> str:
    """One pydantic error in plain words."""
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "extra_forbidden":
        model = _model_at(err["loc"])
        known = list(model.model_fields) if model else []
        close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1, cutoff=0.6)
        return "is not a field of a rollout config" + (f"; did you mean {close[0]!r}?" if close else "")
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')} (got {got!r})"
    if kind in ("greater_than_equal", "greater_than"):
        return (f"must be at least {ctx.get('ge', ctx.get('gt'))}"
                f"{'' if kind.endswith('equal') else ' (exclusive)'} (got {got!r})")
    if kind in ("less_than_equal", "less_than"):
        return f"must be at most {ctx.get('le', ctx.get('lt'))} (got {got!r})"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number (got {got!r})"
    if kind in ("float_parsing", "float_type", "finite_number"):
        return f"must be a number (got {got!r})"
    if kind in ("bool_parsing", "bool_type"):
        return f"must be true or false (got {got!r})"
    if kind == "too_long":
        return f"has too many entries (at most {ctx.get('max_length')})"
    return err["msg"].removeprefix("Value error, ")


def problems_in_plain_words(exc: ValidationError) -> list[dict]:
    """``[{field, message}]``; a problem with the combination of fields has field ``""``."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(part for part in err["loc"] if not str(part).startswith("function-after"))
        # keep_bf16 entries are int-or-string: name the entry, not the union's branches.
        if len(loc) >= 2 and loc[0] == "keep_bf16" and isinstance(loc[1], int):
            loc = loc[:2]
        problems.append({"field": ".".join(str(p) for p in loc), "message": _plain(err)})
    unique = []
    for problem in problems:
        if problem not in unique:
            unique.append(problem)
    return unique


def check_rollout_config(data: dict) -> tuple[dict, str]:
    """The canonical config and its hash, or a 400 naming each problem in plain words."""
    try:
        canonical = canonical_rollout(data)
    except ValidationError as exc:
        problems = problems_in_plain_words(exc)
        summary = "; ".join(f"{p['field'] or 'config'}: {p['message']}" for p in problems)
        raise Refused(f"invalid rollout config: {summary}", details=problems) from None
    check_storable(canonical, "the rollout config")
    return canonical, config_hash(canonical)
