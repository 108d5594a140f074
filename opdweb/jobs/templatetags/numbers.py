"""Number formatting for measurements that span many orders of magnitude: the filters of
:mod:`opdweb.numbers`, one formatter for every page."""
from django import template
from django.template.defaultfilters import floatformat

from opdweb import numbers
from workers.science.results import unit_pair as pair_in_words

register = template.Library()


@register.filter
def sig(value, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures (85,900, 23.2, 1.44e-04), integers as integers."""
    return numbers.significant(value, int(digits))


@register.filter
def times(value, digits: int = 3) -> str:
    """A multiple: ``23.2×``, '–' for none."""
    return numbers.multiple(value, int(digits))


@register.filter
def interval(ends) -> str:
    """An interval in points, ``[-1.50, 1.20]``; an unbounded end is ``−∞`` / ``∞``."""
    low, high = ends
    return (f"[{'−∞' if low is None else floatformat(low, 2)}, "
            f"{'∞' if high is None else floatformat(high, 2)}]")


@register.filter
def unit_pair(unit) -> str:
    """The unit pair a result's multiples are of (its ``unit``, stored or typed: engine and trainer), in words:
    ``vllm BF16 engine / bf16 trainer``; '' for a result that names no unit."""
    get = unit.get if isinstance(unit, dict) else lambda name: getattr(unit, name, None)
    if not get("engine"):
        return ""
    return pair_in_words(str(get("engine")), get("trainer"))


@register.filter
def budget_text(record) -> str:
    """A budget (a stored budget, or a budget spec's dict) with its status: ``≥ 1,050× (not reached)``."""
    get = record.get if isinstance(record, dict) else lambda name: getattr(record, name, None)
    return numbers.budget(get("budget"), get("status"))


@register.simple_tag
def budget_of(value, status) -> str:
    """A budget from its value and status (the paper's criterion beside the stored strict one)."""
    return numbers.budget(value, status)
