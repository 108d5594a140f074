"""JSON request input the rest of the stack can hold: parsed with limits, and checked
for what PostgreSQL cannot store (NUL characters, NaN, Infinity) or Python cannot walk."""
from __future__ import annotations

import json
import math
import sys
from typing import Any

from opdweb.refusals import Refused

# JSON deeper than this is refused: nothing we accept nests that far, and Python's
# recursion (the decoder, pydantic, the encoder) gives out around 1,000 levels.
MAX_JSON_DEPTH = 64


class _NotAJsonNumber(ValueError):
    pass


def _refuse_constant(name: str):
    raise _NotAJsonNumber(f"{name} is not a JSON number")


def load_json(raw: bytes | str, what: str) -> Any:
    """Parse ``raw`` as JSON that PostgreSQL and the rest of the stack can hold, or raise
    :class:`Refused` (400) naming the first offending field: malformed text, nesting deeper
    than :data:`MAX_JSON_DEPTH`, integers over Python's 4,300-digit conversion limit,
    NaN / Infinity, and NUL characters (PostgreSQL cannot store them in text or jsonb)."""
    try:
        data = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        raise Refused(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except (json.JSONDecodeError, UnicodeDecodeError, _NotAJsonNumber) as exc:
        raise Refused(f"{what} is not valid JSON: {exc}") from None
    except ValueError:  # int() past Python's limit on digits
        raise Refused(f"{what} holds an integer longer than {sys.get_int_max_str_digits()} digits") from None
    check_storable(data, what)
    return data


def check_storable(data: Any, what: str, root: str = "") -> None:
    """Refuse (400) what PostgreSQL cannot store or Python cannot walk safely; iterative,
    so a deep document cannot exhaust the stack here."""

    def refuse(where: str, message: str, detail: str | None = None):
        field = where or "(body)"
        raise Refused(detail or f"{what}: {field} {message}", details=[{"field": field, "message": message}])

    stack: list[tuple[str, Any, int]] = [(root, data, 0)]
    while stack:
        where, value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            refuse(where, f"nested deeper than {MAX_JSON_DEPTH} levels",
                   f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(value, str) and "\x00" in value:
            refuse(where, "contains a NUL character")
        elif isinstance(value, float) and not math.isfinite(value):
            refuse(where, "is not a finite number")
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):  # JSON's never are; a mapping built otherwise may be
                    refuse(where, f"has a field name that is not text ({key!r})")
                if "\x00" in key:
                    refuse(where, "a field name contains a NUL character")
                stack.append((f"{where}.{key}" if where else key, item, depth + 1))
        elif isinstance(value, list):
            stack.extend((f"{where}.{i}" if where else str(i), item, depth + 1) for i, item in enumerate(value))
