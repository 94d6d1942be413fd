"""A value derived from a snapshot's static parts, kept for the next call over the same parts.

The simulator (and a steady live cluster) hands in the same nodes, teams and quotas cycle after cycle;
what is derived from them alone need not be rebuilt. One entry per ``KeptForNext``: a call with other
parts replaces it. Parts compare by identity first, then by equality (a live snapshot rebuilds equal
tuples). The kept value is shared by every caller, so it must be treated as read-only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class KeptForNext(Generic[T]):
    """``get(parts, build)``: ``build()``'s value for ``parts``, rebuilt only when the parts change."""

    __slots__ = ("_entry",)

    def __init__(self) -> None:
        self._entry: tuple[tuple, T] | None = None

    def get(self, parts: tuple, build: Callable[[], T]) -> T:
        entry = self._entry  # read once: another thread may replace it (never change it) meanwhile
        if entry is not None and all(a is b or a == b for a, b in zip(entry[0], parts, strict=True)):
            return entry[1]
        value = build()
        self._entry = (parts, value)
        return value
