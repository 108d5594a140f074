"""Each export format's own quoting, so a value can only ever be the value it names.

A config's name, a checkpoint path or an approver's name is text from people; pasted into
a Hydra override, a shell line, a TOML file or a ``#`` comment as it stands, a newline or
a quote in it would add settings of its own to what a teammate approved. Every value an
export writes goes through the function for its place here; each is checked against that
format's own parser (hydra-core, OmegaConf, :mod:`shlex`, :mod:`tomllib`) in
``tests/web/test_export_quoting.py``.
"""
from __future__ import annotations

import json
import re
import shlex

import yaml
from omegaconf._utils import get_yaml_loader  # the loader OmegaConf.from_cli reads values with

_HYDRA_PLAIN = re.compile(r"[A-Za-z0-9_./@:+-]+")


class UnrenderableValue(ValueError):
    """A value the target format cannot hold on one line (a control character)."""


def printable(text: str) -> str:
    """``text`` on one line: every character Python does not print (newlines, tabs, other
    control and format characters) written as its escape, ``\\n``, ``\\x1b``, ``\\u202e``."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def comment(text: str) -> str:
    """A ``#`` comment line holding ``text``, which cannot end the comment early."""
    return f"# {printable(text)}"


def _one_line(value: str) -> str:
    if not value.isprintable():
        raise UnrenderableValue(f"{printable(value)!r} holds a control character and cannot be exported")
    return value


def hydra_value(value: str) -> str:
    """``value`` as a Hydra override's value, as verl's config will hold it once OmegaConf
    has resolved it: plain where it is a plain path or word, else single-quoted. Inside the
    quotes Hydra reads a backslash only before a quote, and OmegaConf only before ``${``
    (which it would interpolate): there, the backslashes before it are doubled and one more
    escapes it."""
    _one_line(value)
    if _HYDRA_PLAIN.fullmatch(value):
        return value
    out = []
    backslashes = 0
    for i, char in enumerate(value):
        if char == "\\":
            backslashes += 1
            continue
        if char == "'":
            out.append("\\" * (2 * backslashes) + "\\'")
        elif value.startswith("${", i):
            out.append("\\" * (2 * backslashes) + "\\$")
        else:
            out.append("\\" * backslashes + char)
        backslashes = 0
    return "'" + "".join(out) + "\\" * (2 * backslashes) + "'"  # doubled before the closing quote


def _escape_interpolation(value: str) -> str:
    """``value`` with every ``${`` escaped as OmegaConf reads it: the backslashes before it
    doubled and one more before it."""
    out, backslashes = [], 0
    for i, char in enumerate(value):
        if char == "\\":
            backslashes += 1
            continue
        if value.startswith("${", i):
            out.append("\\" * (2 * backslashes + 1) + "$")
        else:
            out.append("\\" * backslashes + char)
        backslashes = 0
    return "".join(out) + "\\" * backslashes


def omegaconf_cli_value(value: str) -> str:
    """``value`` as the value of an OmegaConf command-line override (``key=value``, read by
    ``OmegaConf.from_cli``: YAML, then resolved): plain where it is a plain path or word that
    YAML reads back as that string, else a YAML double-quoted string, ``${`` escaped."""
    _one_line(value)
    if _HYDRA_PLAIN.fullmatch(value):
        try:
            if yaml.load(value, Loader=get_yaml_loader()) == value:  # noqa: S506 - OmegaConf's own safe loader
                return value
        except yaml.YAMLError:
            pass
    return json.dumps(_escape_interpolation(value))


def omegaconf_cli_list(values: list[str | int]) -> str:
    """``values`` as an OmegaConf command-line list: a YAML flow sequence of JSON strings and
    numbers, ``${`` escaped, so no element can end it or add one."""
    return json.dumps([_escape_interpolation(_one_line(v)) if isinstance(v, str) else v for v in values],
                      separators=(",", ":"))


def shell_word(value: str) -> str:
    """``value`` as one word of a POSIX shell line."""
    return shlex.quote(_one_line(value))


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string (quote, backslash and control characters escaped)."""
    escaped = []
    for char in value:
        if char in '"\\':
            escaped.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'
