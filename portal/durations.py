"""Durations in words for people: ``604800`` seconds reads "7 days", and "7 days", "36 hours", "90 min" or a
plain number of seconds read back exactly. Pure (no Django), so forms, templates and the CLI share it."""

import math
import re

# the largest unit that divides a duration exactly names it (weeks are left to days: "14 days")
UNITS = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))
ALIASES = {"d": 86400, "day": 86400, "days": 86400, "w": 604800, "week": 604800, "weeks": 604800,
           "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
           "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
           "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1}
_TEXT = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)\s*([a-z]*)\s*$")  # a negative one is the caller's to refuse
EXAMPLE = "a number and a unit, such as 7 days, 36 hours, 90 minutes or 3600 seconds"


def duration_words(seconds: float) -> str:
    """``seconds`` in the largest unit that holds it exactly: 604800 -> "7 days", 5400 -> "90 minutes",
    1.5 -> "1.5 seconds"."""
    if seconds != int(seconds):
        return f"{seconds:g} seconds"
    whole = int(seconds)
    for name, size in UNITS:
        if whole and whole % size == 0:
            n = whole // size
            return f"{n} {name}{'' if n == 1 else 's'}"
    return "0 seconds"


def duration_parse(text: str) -> float:
    """Seconds in ``text`` ("7 days", "7d", "36 h", "90 minutes", "1 week"; a bare number is seconds).
    Raises ValueError naming what it takes."""
    found = _TEXT.match(str(text).lower())
    if found is None or (found.group(2) and found.group(2) not in ALIASES):
        raise ValueError(f"must be {EXAMPLE}; got {str(text)[:40]!r}")
    seconds = float(found.group(1)) * ALIASES.get(found.group(2) or "s", 1)
    if not math.isfinite(seconds):
        raise ValueError(f"must be {EXAMPLE}; got {str(text)[:40]!r}")
    return seconds
