"""Readable renderings of stored structures (audit before/after, what-if changes) for people, not Python."""

import json
import re
from decimal import Decimal

from django import template
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe

register = template.Library()


# Keys people look for first, in this order; others follow in the order they were stored (PostgreSQL's jsonb
# keeps its own order, which would otherwise put a quota's limit before its team).
_FIRST = ("name", "team", "gpu_model", "pool", "state", "guaranteed", "limit", "weight", "value")
_DECIMAL = re.compile(r"^-?[0-9]+\.[0-9]+$")


def _ordered(mapping: dict) -> list:
    rank = {k: i for i, k in enumerate(_FIRST)}
    return sorted(mapping.items(), key=lambda kv: rank.get(kv[0], len(_FIRST)))


def _number(value) -> str:
    """2.500 and 2.0 as people write them (2.5, 2); other numbers as they are."""
    text = str(value)
    return text.rstrip("0").rstrip(".") if _DECIMAL.match(text) else text


def _text(value) -> str:
    if isinstance(value, str):
        return _number(value)
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{str(k).replace('_', ' ')} {_text(v)}" for k, v in _ordered(value)) or "none"
    if isinstance(value, list | tuple):
        return "; ".join(_text(v) for v in value) or "none"
    if isinstance(value, float | Decimal):
        return _number(value)
    return json.dumps(value, default=str, ensure_ascii=False) if not isinstance(value, int) else str(value)


@register.filter
def fields(value):
    """A mapping as one ``key: value`` line each (nested values as compact JSON); a list as one line per
    item; anything else as text; ``–`` for nothing."""
    if value is None or value == {} or value == []:
        return "–"
    if isinstance(value, dict):
        return format_html_join(mark_safe("<br>"), "<b>{}</b>: {}",
                                ((str(k).replace("_", " "), _text(v)) for k, v in _ordered(value)))
    if isinstance(value, list | tuple):
        return format_html_join(mark_safe("<br>"), "{}", ((fields(item),) for item in value))
    return _text(value)
