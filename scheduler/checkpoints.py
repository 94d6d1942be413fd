"""The checkpoint and lost-work rules, in one place (pure: no Django, no clock).

A running attempt reports a checkpoint (its node saw ``$ROTA_CHECKPOINT_FILE`` change, or its team called
``rota checkpoint``); the job's ``last_checkpoint_at`` is then the moment its work was last saved. When the
attempt is preempted, the work since then is lost: its GPU-seconds from the last checkpoint of *this* attempt
(or, without one, from the attempt's start) to the moment its processes were gone. That work is credited back
to its team: in fair share (``scheduler.selectors_lost_work``, read by the snapshot's decayed usage) and as a
credit line in chargeback (``accounting.credits``).

The same rules are used by the live cycle (snapshot), the node and user APIs, and accounting, so the engine's
victim choice, the recorded loss and the credit always agree.
"""

from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")  # a moment: a datetime, or seconds since 1970 in the snapshot


def work_since(started: T | None, checkpoint: T | None) -> T | None:
    """Where the unsaved work of an attempt begins: its last checkpoint when that was taken during the attempt
    (a checkpoint older than the attempt's start belongs to an earlier attempt), else the attempt's start."""
    if checkpoint is not None and (started is None or checkpoint >= started):  # type: ignore[operator]
        return checkpoint
    return started


def checkpoint_of_attempt(started: T | None, checkpoint: T | None) -> T | None:
    """The checkpoint that counts for the current attempt (None when the last one was before it started)."""
    if checkpoint is None or started is None or checkpoint < started:  # type: ignore[operator]
        return None
    return checkpoint


def checkpoint_accepted(at: T, *, started: T | None, last: T | None, now: T, admitted: T | None = None) -> T | None:
    """The moment to record for a checkpoint reported at ``at``, or None when it changes nothing.

    Never in the future (a node's clock ahead of the portal's counts as now), never before the attempt
    started: one between its admission and the moment the portal heard it started (a job that saves at once,
    before its node's ``started`` report arrived) counts as at the start; an older one (a file an earlier
    attempt left) changes nothing. Monotonic: one no later than the recorded checkpoint of this attempt
    changes nothing (a resent report is harmless)."""
    at = min(at, now)  # type: ignore[type-var]
    if started is None:
        return None
    if at < started:  # type: ignore[operator]
        if admitted is None or at < admitted:  # type: ignore[operator]
            return None
        at = started
    current = checkpoint_of_attempt(started, last)
    if current is not None and at <= current:  # type: ignore[operator]
        return None
    return at


def lost_gpu_seconds(held: Iterable[tuple[float, float, float]], since: float) -> float:
    """GPU-seconds of work lost by a preemption: for each ``(share, held_from, held_until)`` of the attempt
    (times in seconds), the share times the part of the interval after ``since``."""
    return sum(share * max(0.0, until - max(since, start)) for share, start, until in held)


def lost_in_window(lost_gpu_s: float, since: float, until: float, window_start: float) -> float:
    """The part of ``lost_gpu_s`` (spread evenly over ``[since, until)``) that falls after ``window_start``:
    what a usage window that starts there counted of it."""
    if until <= window_start:
        return 0.0
    span = until - since
    if span <= 0 or since >= window_start:
        return lost_gpu_s
    return lost_gpu_s * (until - window_start) / span
