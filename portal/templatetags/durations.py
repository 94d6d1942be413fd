"""``{% load durations %}`` ``{{ seconds|duration }}``: a number of seconds in words ("7 days")."""

from django import template

from portal.durations import duration_words

register = template.Library()


@register.filter
def duration(seconds) -> str:
    try:
        return duration_words(float(seconds))
    except (TypeError, ValueError):
        return ""
