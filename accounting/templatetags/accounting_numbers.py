"""Template filters over ``accounting.numbers``: ``{{ hours|qty:2 }}``, ``{{ cost|money }}``, ``{{ ratio|percent }}``,
so the dashboard's tiles and tables round as its charts and the PDF statements do."""

from django import template

from accounting import numbers

register = template.Library()


@register.filter
def qty(value, places=1):
    """A quantity with ``places`` decimals (default 1), or two significant digits below 1."""
    return numbers.quantity(value, int(places))


@register.filter
def money(value):
    """An amount in cents; ``<0.01`` when non-zero but under a cent."""
    return numbers.money(value)


@register.filter
def percent(ratio):
    """A ratio as whole percent; ``<1%`` when non-zero but under one."""
    return numbers.percent(ratio)
