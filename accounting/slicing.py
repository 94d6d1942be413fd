"""Cut allocation intervals into ledger slices at period boundaries. Pure: no Django, no clock.

A slice is the part of one allocation ``[start, end)`` that falls in one bucket ``[b, b + size)``.
Durations are whole microseconds and GPU-seconds are exact ``Decimal``, so the slices of an interval add
up to the interval exactly (GPU-seconds billed equal GPU-seconds held).
"""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

HOUR = timedelta(hours=1)
_MICRO = 10**6


@dataclass(frozen=True, slots=True)
class Slice:
    """``held_us`` microseconds of wall time inside the bucket starting at ``period_start``."""

    period_start: datetime
    held_us: int


def bucket_floor(at: datetime, size: timedelta = HOUR) -> datetime:
    """The start of the bucket holding ``at`` (buckets are aligned to the Unix epoch, in UTC)."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    steps = (at - epoch) // size
    return epoch + steps * size


def to_us(delta: timedelta) -> int:
    """A duration in whole microseconds (exact: timedelta holds microseconds)."""
    return (delta.days * 86_400 + delta.seconds) * _MICRO + delta.microseconds


def slice_interval(start: datetime, end: datetime, size: timedelta = HOUR) -> Iterator[Slice]:
    """The slices of ``[start, end)``; nothing when the interval is empty."""
    if end <= start:
        return
    bucket = bucket_floor(start, size)
    while bucket < end:
        lo, hi = max(start, bucket), min(end, bucket + size)
        yield Slice(period_start=bucket, held_us=to_us(hi - lo))
        bucket += size


def gpu_seconds(held_us: int, share_milli: int) -> Decimal:
    """GPU-seconds for ``held_us`` microseconds at ``share_milli`` thousandths of a device (exact)."""
    return Decimal(held_us * share_milli) / Decimal(10**9)
