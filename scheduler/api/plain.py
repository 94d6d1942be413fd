"""A body whose every value is plainly valid, read without DRF's walk over its serializer's fields.

DRF validates a field in about ten calls (empty values, conversion, each validator, the ``validate_<name>``
hook): ~50 µs for a job event of 12 fields, ~1 ms of a batch of 20 events' CPU. Most bodies hold only what
no field could refuse: integers in range, known choices, short ASCII text. ``plain_validated`` reads those to
what DRF would give (in a fraction of the time) and answers None for anything else, which then goes DRF's own
way and gets its errors. It reads each field's own settings (required, default, null, limits, choices), so the
rules stay where they are declared: for a serializer whose fields add no validators, sources or
``validate_<name>`` hooks of their own (tests/scheduler/test_event_validation.py checks the job event's against
DRF's walk).
"""

from __future__ import annotations

from collections.abc import Iterable

from rest_framework import fields as drf

REFUSED = object()  # not plainly valid: DRF decides


def plain_validated(fields: Iterable[tuple[str, drf.Field]], data) -> dict | None:
    """What ``Serializer.to_internal_value`` gives for ``data`` through ``fields`` (a serializer's bound
    fields, as ``(name, field)`` pairs), when every value is plainly valid; None when DRF is to decide (it
    may refuse, or convert)."""
    if type(data) is not dict:
        return None
    validated = {}
    for name, field in fields:
        value = data.get(name, drf.empty)
        if value is drf.empty:
            if field.required:
                return None
            if field.default is drf.empty:  # (a class: callable)
                continue
            if callable(field.default):  # DRF calls it, with or without the field: its way
                return None
            validated[name] = field.default
            continue
        if value is None:
            if not field.allow_null:
                return None
            validated[name] = None
            continue
        read = _READERS.get(type(field))
        value = REFUSED if read is None else read(field, value)
        if value is REFUSED:
            return None
        validated[name] = value
    return validated


def _integer(field: drf.IntegerField, value):
    if type(value) is not int:  # a bool, a string or a float DRF converts (or refuses)
        return REFUSED
    if (field.min_value is not None and value < field.min_value) or (
            field.max_value is not None and value > field.max_value):
        return REFUSED
    return value


def _choice(field: drf.ChoiceField, value):
    if type(value) is not str:
        return REFUSED
    if value == "" and field.allow_blank:
        return ""
    return field.choice_strings_to_values.get(value, REFUSED)


def _text(field: drf.CharField, value):
    """ASCII without NUL (DRF's validators refuse NUL and surrogates), trimmed as DRF trims it; a value that
    is blank once trimmed is "" where blank is allowed; any other length limit DRF checks."""
    if type(value) is not str or not value.isascii() or "\x00" in value:
        return REFUSED
    text = value.strip() if field.trim_whitespace else value
    if text == "":
        return "" if field.allow_blank else REFUSED
    if (field.max_length is not None and len(text) > field.max_length) or (
            field.min_length is not None and len(text) < field.min_length):
        return REFUSED
    return text


def _pattern(field: drf.RegexField, value):
    """Only a blank value (its pattern is DRF's to check)."""
    if type(value) is str and (value == "" or (field.trim_whitespace and value.strip() == "")) and field.allow_blank:
        return ""
    return REFUSED


_READERS = {drf.IntegerField: _integer, drf.ChoiceField: _choice, drf.CharField: _text, drf.RegexField: _pattern}
