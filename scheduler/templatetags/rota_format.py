"""Readable renderings of stored structures (audit before/after, what-if changes) for people, not Python."""

import json

from django import template
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe

register = template.Library()


def _text(value) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    return str(value)


@register.filter
def fields(value):
    """A mapping as one ``key: value`` line each (nested values as compact JSON); a list as one line per
    item; anything else as text; ``–`` for nothing."""
    if value is None or value == {} or value == []:
        return "–"
    if isinstance(value, dict):
        return format_html_join(mark_safe("<br>"), "<b>{}</b>: {}",
                                ((str(k).replace("_", " "), _text(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return format_html_join(mark_safe("<br>"), "{}", ((fields(item),) for item in value))
    return _text(value)
