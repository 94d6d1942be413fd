"""Pending-reason codes: stable words (after Slurm and Kueue) that the portal, API and users rely on.

A reason is ``Reason(code, message, details)``; the message is for people and always carries the numbers,
the details carry the same numbers for machines, and ``details["plugin"]`` names the plugin (or action)
whose rule made the decision (quota, priority, placement, gang, sharing, preempt, admit). Never rename a
code: clients match on them.
"""

from collections.abc import Callable

from scheduler.core.types import Reason

PRIORITY = "Priority"  # a job ahead in the queue holds (or has reserved) the resources this job needs
RESOURCES = "Resources"  # not enough free GPUs of an accepted model right now
QUOTA_EXCEEDED = "QuotaExceeded"  # the team's own limit (or missing quota) for the GPU model blocks it
OVER_LIMIT = "OverLimit"  # a parent team's limit, or the team's weighted share of borrowable capacity
NON_PREEMPTIBLE_OVER_QUOTA = "NonPreemptibleOverQuota"  # non-preemptible work must fit in guaranteed
NO_MATCHING_POOL = "NoMatchingPool"  # the team may not use any pool the job could run in
NO_MATCHING_GPU_MODEL = "NoMatchingGpuModel"  # no node in the allowed pools carries an accepted model
IMAGE_NOT_ALLOWED = "ImageNotAllowed"  # no pool the job may use allows its container image
UNSATISFIABLE = "Unsatisfiable"  # no node could ever hold the job, even on an empty cluster
GANG_INCOMPLETE = "GangIncomplete"  # some but not all members of a multi-node gang could be placed
TOPOLOGY = "Topology"  # a gang that one switch / NVLink domain could hold waits for one (enough nodes, spread)
NODES_UNHEALTHY = "NodesUnhealthy"  # only nodes/GPUs that are down, draining or unhealthy could hold it
HELD = "Held"  # held by a user or admin: skipped until released
PREEMPTING = "Preempting"  # victims are being stopped for this job; it starts once they are gone
WAITING_FOR_RECLAIM = "WaitingForReclaim"  # reserved for the owner: borrowed capacity is being reclaimed

ALL_CODES = (
    PRIORITY,
    RESOURCES,
    QUOTA_EXCEEDED,
    OVER_LIMIT,
    NON_PREEMPTIBLE_OVER_QUOTA,
    NO_MATCHING_POOL,
    NO_MATCHING_GPU_MODEL,
    IMAGE_NOT_ALLOWED,
    UNSATISFIABLE,
    GANG_INCOMPLETE,
    TOPOLOGY,
    NODES_UNHEALTHY,
    HELD,
    PREEMPTING,
    WAITING_FOR_RECLAIM,
)

# Codes that no amount of waiting fixes without someone changing the job, the quota or the cluster.
PERMANENT_CODES = frozenset({NO_MATCHING_POOL, NO_MATCHING_GPU_MODEL, IMAGE_NOT_ALLOWED, UNSATISFIABLE})


def reason(code: str, message: str, **details: object) -> Reason:
    """Build a Reason; ``details`` are the message's numbers and names, keyed for machines, and
    ``plugin``: the plugin (or action) whose rule made the decision."""
    return Reason(code=code, message=message, details=details)


def reasoner(plugin: str) -> Callable[..., Reason]:
    """``reason`` for the rules of ``plugin``: every Reason it builds names the plugin in its details."""

    def make(code: str, message: str, **details: object) -> Reason:
        details["plugin"] = plugin
        return Reason(code=code, message=message, details=details)

    return make


def fmt_gpus(value: float) -> str:
    """Format a GPU amount for messages: whole numbers without decimals, fractions with up to 3 digits."""
    if abs(value - round(value)) < 1e-9:
        return str(round(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


def num(value: float) -> int | float:
    """A GPU amount for ``details``: an int when whole (16, not 16.0), else the float."""
    if abs(value - round(value)) < 1e-9:
        return round(value)
    return value


def fmt_duration(seconds: float) -> str:
    """A wait in words: "now", "45 s", "12 min", "3 h 20 min", "2 d 4 h"."""
    s = max(0, round(seconds))
    if s == 0:
        return "now"
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{round(s / 60)} min"
    if s < 86400:
        h, m = divmod(round(s / 60), 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(round(s / 3600), 24)
    return f"{d} d {h} h" if h else f"{d} d"
