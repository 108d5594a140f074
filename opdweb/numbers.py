"""The one number formatter of every page: measurements that span many orders of magnitude
to significant digits, integers as integers, and a budget with its status ("≥" when the
ladder never reached it).  The template filters in ``opdweb/jobs/templatetags/numbers.py``
call these; so does any Python that writes a number for people to read."""
from __future__ import annotations

import math
from typing import Any


def significant(value: Any, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures: 85,900 (not 85916.811 or 8.59e+04), 23.2,
    0.5, 1.44e-04; an integer (or an integral float such as a seed) as an integer; '' for
    None.  Large values keep their thousands separators and no exponent."""
    if value is None or value == "":
        return ""
    if isinstance(value, bool):
        return str(value)
    try:
        x = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(x):
        return "∞" if x > 0 else ("−∞" if x < 0 else "NaN")
    if isinstance(value, int) or (x.is_integer() and abs(x) < 1e15 and not isinstance(value, str)):
        if abs(x) < 10**digits or isinstance(value, int):
            return f"{int(x):,}"
    if x == 0:
        return "0"
    x = float(f"{x:.{digits - 1}e}")  # rounded first, so 0.9998 is 1 and its magnitude is 0
    magnitude = math.floor(math.log10(abs(x)))
    if magnitude >= digits - 1:  # a whole number to the digits asked for: 85916.811 -> 85,900
        return f"{int(x):,}"
    if magnitude >= -4:  # as %g writes it: no trailing zeros (1.4, not 1.40; 0.000319)
        return f"{x:.{digits - 1 - magnitude}f}".rstrip("0").rstrip(".")
    mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{exponent}"


def multiple(value: Any, digits: int = 3) -> str:
    """A multiple of the BF16 unit: ``85,900×``; '–' when there is none."""
    text = significant(value, digits)
    return f"{text}×" if text else "–"


def budget(value: Any, status: str | None) -> str:
    """A budget as every page writes it: ``12.5×``, ``≥ 1,050× (not reached)`` when every level
    of the ladder was within, ``below the ladder`` when none was, ``none (uninformative)`` or
    ``none (undecided)``."""
    if status in ("uninformative", "undecided"):
        return f"none ({status})"
    if status == "below_ladder" or value is None:
        return "below the ladder"
    if status == "not_reached":
        return f"≥ {multiple(value)} (not reached)"
    return multiple(value)
