"""Each export format's own quoting, so a value can only ever be the value it names.

A config's name, a checkpoint path or an approver's name is text from people; pasted into
a Hydra override, a shell line, a TOML file or a ``#`` comment as it stands, a newline or
a quote in it would add settings of its own to what a teammate approved. Every value an
export writes goes through the function for its place here; each is checked against that
format's own parser (hydra-core, :mod:`shlex`, :mod:`tomllib`) in
``tests/web/test_export_quoting.py``.
"""
from __future__ import annotations

import re
import shlex

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
