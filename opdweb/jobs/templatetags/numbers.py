"""Number formatting for measurements that span many orders of magnitude."""
from django import template

register = template.Library()


@register.filter
def sig(value, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures (1.44e-04, 0.9998, 23.2); '' for None."""
    if value is None or value == "":
        return ""
    try:
        return f"{float(value):.{int(digits)}g}"
    except (TypeError, ValueError):
        return str(value)
