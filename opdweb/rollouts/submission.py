"""What a person submits as a rollout config (the form's inputs, pasted or uploaded YAML)
turned into the canonical config, or refused with one plain sentence per field."""
from __future__ import annotations

import yaml
from django.conf import settings

from opdweb.api import check_storable
from opdweb.exports import FORMATS, target_refusals
from opdweb.refusals import Refused
from opdweb.rollouts.canonical import ValidationError, canonical_rollout, config_hash
from opdweb.rollouts.form_schema import ROLLOUT_FIELDS, set_at
from workers.science.config import RolloutConfig, validation_problems

#: The largest whole number (either side of zero) a rollout config may hold.  Every field's
#: own bound is far smaller; this one is checked before anything is built, so that no number
#: reaches Python's 4,300-digit limit on int/str conversion, the schema or PostgreSQL, and
#: every export format (TOML's integers are 64-bit) can write what was accepted.
MAX_WHOLE_NUMBER = 2**63 - 1
_TOO_LARGE = f"is too large: whole numbers in a rollout config are at most {MAX_WHOLE_NUMBER:,} in magnitude"


def _line_entry(name: str, index: int, line: str, as_typed: bool):
    """One line of a "lines" input: digits are a number (a layer index), the rest text."""
    if not line.isdecimal():  # not isdigit(): int() refuses "²", which isdigit() accepts
        return line
    if len(line) <= len(str(MAX_WHOLE_NUMBER)) and int(line) <= MAX_WHOLE_NUMBER:
        return int(line)
    if as_typed:
        return line
    message = f"{_TOO_LARGE} (this one has {len(line):,} digits)"
    raise Refused(f"{name} entry {index}: {message}", details=[{"field": f"{name}.{index}", "message": message}])


def config_from_form(post, *, as_typed: bool = False) -> dict:
    """The config the form's inputs describe.  Values are passed on as typed, so the schema
    (not this function) judges them; an empty number means the default.  A line of digits
    too long to be a number is refused here (400), or with ``as_typed`` (the form shown
    again) kept as it was typed."""
    config: dict = {}
    for field in ROLLOUT_FIELDS:
        raw = post.get(field.name)
        if field.widget == "checkbox":
            set_at(config, field.name, raw is not None)
        elif field.widget == "lines":
            lines = [line.strip() for line in (raw or "").splitlines() if line.strip()]
            set_at(config, field.name, [_line_entry(field.name, i, line, as_typed) for i, line in enumerate(lines)])
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


_STR_TAG, _INT_TAG = "tag:yaml.org,2002:str", "tag:yaml.org,2002:int"
#: What YAML 1.1 reads an unquoted key as, when not as text: ``on`` is true, ``~`` null.
_READ_AS = {"tag:yaml.org,2002:bool": "true or false", "tag:yaml.org,2002:null": "null",
            "tag:yaml.org,2002:int": "a number", "tag:yaml.org,2002:float": "a number",
            "tag:yaml.org,2002:timestamp": "a date", "tag:yaml.org,2002:merge": "a merge key (<<)",
            "tag:yaml.org,2002:value": "a value key (=)"}
#: A whole number written longer than this is refused unbuilt (2**63 takes 19 digits, or
#: 66 characters in binary): building it could take long, or Python refuse it.
_MAX_WHOLE_NUMBER_CHARS = 100


def _refuse_yaml(field: str, message: str):
    raise Refused(f"the YAML: {field} {message}", details=[{"field": field, "message": message}])


def _check_whole_number(loader: yaml.SafeLoader, where: str, node: yaml.ScalarNode) -> None:
    if len(node.value) > _MAX_WHOLE_NUMBER_CHARS:
        _refuse_yaml(where, f"{_TOO_LARGE} (this one is written with {len(node.value):,} characters)")
    try:
        value = loader.construct_yaml_int(node)
    except ValueError:  # an explicit !!int on what is no number
        _refuse_yaml(where, f"is tagged !!int but {node.value!r} is not a whole number")
    if abs(value) > MAX_WHOLE_NUMBER:
        _refuse_yaml(where, _TOO_LARGE)


def _check_input_limits(loader: yaml.SafeLoader, root: yaml.Node) -> None:
    """Refuse (400, naming the key) what the YAML says that no rollout config can: keys that
    YAML reads as something other than text (``1``, ``on``, ``~``, dates) and whole numbers
    past :data:`MAX_WHOLE_NUMBER`.  It walks the composed nodes, before any value is built,
    iteratively (the depth is the composer's and check_storable's to limit)."""
    stack: list[tuple[str, yaml.Node]] = [("", root)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                line = key_node.start_mark.line + 1
                if not isinstance(key_node, yaml.ScalarNode):
                    kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
                    _refuse_yaml(where or "(top level)", f"has a key that is a {kind} (line {line}), not a field name")
                path = f"{where}.{key_node.value}" if where else key_node.value
                if key_node.tag != _STR_TAG:
                    read_as = _READ_AS.get(key_node.tag, f"a {key_node.tag} value")
                    _refuse_yaml(path, f"is read as {read_as} (line {line}), not as a field name; "
                                       f"put it in quotes ('{key_node.value}') if you mean the name")
                stack.append((path, value_node))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((f"{where}.{i}" if where else str(i), item) for i, item in enumerate(node.value))
        elif node.tag == _INT_TAG:
            _check_whole_number(loader, where or "(top level)", node)


def config_from_yaml(text: str) -> dict:
    """A YAML mapping, or a 400 (a 413 past the size limit) saying what is wrong with it.
    The input limits (:func:`_check_input_limits`) are checked on the parsed nodes before
    any value is built."""
    limit = settings.JOB_CONFIG_MAX_BYTES
    if len(text.encode()) > limit:
        raise Refused(f"the YAML is {len(text.encode()):,} bytes; a rollout config may be at most {limit:,}",
                      status=413)
    try:
        loader = _LoaderWithoutAliases(text)  # the reader refuses unprintable characters here
    except yaml.YAMLError as exc:
        raise Refused(f"the YAML cannot be read: {exc}") from None
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise Refused(f"the YAML cannot be read: {exc}") from None
        except RecursionError:
            raise Refused("the YAML is nested too deeply to be a rollout config") from None
        if node is None:
            return {}
        _check_input_limits(loader, node)
        try:
            data = loader.construct_document(node)
        except (yaml.YAMLError, ValueError, TypeError, AttributeError, ArithmeticError) as exc:
            # e.g. !!float or !!timestamp on what is no number or date
            raise Refused(f"the YAML cannot be read: {exc}") from None
        except RecursionError:
            raise Refused("the YAML is nested too deeply to be a rollout config") from None
    finally:
        loader.dispose()
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise Refused(f"the YAML must be a mapping of field: value, not a {type(data).__name__}")
    check_storable(data, "the YAML")
    return data


def problems_in_plain_words(exc: ValidationError) -> list[dict]:
    """``[{field, message}]`` in the words every form uses (:func:`validation_problems`);
    a problem with the combination of fields has field ``""``."""
    problems = []
    for problem in validation_problems(exc, root="", model=RolloutConfig):
        parts = problem["field"].split(".")
        # keep_bf16 entries are int-or-string: name the entry, not the union's branches.
        if len(parts) > 2 and parts[0] == "keep_bf16" and parts[1].isdigit():
            problem = {**problem, "field": ".".join(parts[:2])}
        if problem not in problems:
            problems.append(problem)
    return problems


def check_rollout_config(data: dict) -> tuple[dict, str]:
    """The canonical config and its hash, or a 400 naming each problem in plain words."""
    try:
        canonical = canonical_rollout(data)
    except ValidationError as exc:
        problems = problems_in_plain_words(exc)
        summary = "; ".join(f"{p['field'] or 'config'}: {p['message']}" for p in problems)
        raise Refused(f"invalid rollout config: {summary}", details=problems) from None
    check_storable(canonical, "the rollout config")
    check_targets(canonical)
    return canonical, config_hash(canonical)


def check_targets(canonical: dict, facts=None, status: int = 400) -> None:
    """A 4xx naming, for each trainer the config names in ``targets``, where that trainer
    would build another engine (``facts`` None: on any checkpoint)."""
    refused = target_refusals(RolloutConfig.model_validate(canonical), facts)
    if refused:
        details = [{"field": "targets", "message": f"{FORMATS[slug].target}: {reason}"}
                   for slug, reasons in refused.items() for reason in reasons]
        raise Refused("the config names trainers that would build another engine: "
                      + "; ".join(d["message"] for d in details), status=status, details=details)
