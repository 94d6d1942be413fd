"""Date ranges for reports: months, presets and day/week/month aggregation. Pure (no Django, no clock)."""

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

MONTH_FORMAT = "YYYY-MM"
PRESETS = {
    "7d": "Last 7 days",
    "30d": "Last 30 days",
    "90d": "Last 90 days",
    "this-month": "This month",
    "last-month": "Last month",
    "custom": "Custom",
}
AGGREGATIONS = ("day", "week", "month")
# The days a report may cover. Nothing is billed before 1970; the last year before ``date.max`` is left out so
# that period arithmetic (the next month, the next week, an exclusive end) never overflows.
EARLIEST = date(1970, 1, 1)
LATEST = date(9998, 12, 31)
_MONTH = re.compile(r"^([0-9]{4})-([0-9]{2})$")  # ASCII digits only (\d would take other scripts' digits)
_DAY = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")


@dataclass(frozen=True, slots=True)
class Range:
    """``[start, end)`` in UTC; ``label`` says what it is in words."""

    start: datetime
    end: datetime
    label: str

    @property
    def last_day(self) -> date:
        """The last day the range covers (its end is exclusive: a month ends at the next month's first)."""
        return (self.end - timedelta(microseconds=1)).date()


def _at(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def month_start(d: date) -> date:
    return d.replace(day=1)


def next_month(d: date) -> date:
    return (d.replace(day=1) + timedelta(days=32)).replace(day=1)


def parse_month(value: str | None) -> Range:
    """``YYYY-MM`` → that month as a range; otherwise ValueError with the expected format and range, phrased to
    follow the field's name ("Month must be …")."""
    m = _MONTH.match(value or "")
    year, month = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    if not 1 <= month <= 12 or not EARLIEST.year <= year <= LATEST.year:
        raise ValueError(
            f"must be a month as {MONTH_FORMAT} from {EARLIEST:%Y-%m} to {LATEST:%Y-%m}, e.g. 2026-11; got {value!r}"
            if value
            else f"is required: a month as {MONTH_FORMAT} from {EARLIEST:%Y-%m} to {LATEST:%Y-%m}, e.g. 2026-11"
        )
    first = date(year, month, 1)
    return Range(_at(first), _at(next_month(first)), first.strftime("%B %Y"))


def parse_day(value: str) -> date:
    """``YYYY-MM-DD`` → that day; otherwise ValueError with the expected format and range, phrased to follow the
    field's name ("From must be …")."""
    try:  # fromisoformat alone would also take 20261101 or 2026-W48-3
        day = date.fromisoformat(value) if _DAY.match(value or "") else None
    except ValueError:
        day = None
    if not value:
        raise ValueError(f"is required: a day as YYYY-MM-DD from {EARLIEST} to {LATEST}")
    if day is None or not EARLIEST <= day <= LATEST:
        raise ValueError(f"must be a day as YYYY-MM-DD from {EARLIEST} to {LATEST}; got {value!r}")
    return day


def preset_range(preset: str, today: date, start: str | None = None, end: str | None = None) -> Range:
    """The range for a preset (ending with today, inclusive) or a custom ``start``..``end`` (inclusive days).
    ValueError phrased to follow the name of the field at fault: the preset, or else ``end``, once both days
    parse (``parse_day`` names a bad day)."""
    tomorrow = today + timedelta(days=1)
    if preset in ("7d", "30d", "90d"):
        days = int(preset[:-1])
        return Range(_at(tomorrow - timedelta(days=days)), _at(tomorrow), PRESETS[preset])
    if preset == "this-month":
        return Range(_at(month_start(today)), _at(next_month(today)), PRESETS[preset])
    if preset == "last-month":
        first = month_start(month_start(today) - timedelta(days=1))
        return Range(_at(first), _at(month_start(today)), PRESETS[preset])
    if preset == "custom":
        lo, hi = parse_day(start), parse_day(end)
        if hi < lo:
            raise ValueError(f"must not be before the first day, {lo}; got {hi}")
        if (hi - lo).days > 366 * 3:
            raise ValueError(f"must be at most three years after the first day, {lo}; got {hi}")
        return Range(_at(lo), _at(hi + timedelta(days=1)), f"{lo} – {hi}")
    raise ValueError(f"must be one of {', '.join(PRESETS)}; got {preset!r}")


def _period_floor(at: datetime, agg: str) -> datetime:
    """The start of the ``agg`` period holding ``at`` (weeks start on Monday), as PostgreSQL's date_trunc."""
    at = at.replace(minute=0, second=0, microsecond=0)
    if agg == "hour":
        return at
    at = at.replace(hour=0)
    if agg == "week":
        return at - timedelta(days=at.weekday())
    if agg == "month":
        return at.replace(day=1)
    return at


def _period_next(at: datetime, agg: str) -> datetime:
    if agg == "month":
        return _at(next_month(at.date()))
    return at + {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(days=7)}[agg]


def spans(start: datetime, end: datetime, agg: str) -> list[tuple[datetime, datetime, datetime]]:
    """The ``agg`` periods (hour, day, week, month) covering ``[start, end)``: (period start, clipped start,
    clipped end), the period start being the key the ledger groups by."""
    out = []
    key = _period_floor(start, agg)
    while key < end:
        nxt = _period_next(key, agg)
        out.append((key, max(key, start), min(nxt, end)))
        key = nxt
    return out
