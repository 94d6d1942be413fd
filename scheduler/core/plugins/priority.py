"""Priority plugin: the queue's order, and who may preempt whom by priority.

Order: higher ``priority`` first, then the policy's order inside a priority: arrival (fifo), the team's
decayed usage relative to its entitlement, then arrival (fairshare, see ``plugins.fairshare``), or least
attained service, then arrival (las). Job id breaks every remaining tie, so order is total. With
discretized LAS (the policy's ``las_thresholds_gpu_s``) each job's priority becomes its rank: priority
first, then service level (fewer passed thresholds rank higher), so order, victim choice and the
preemption rules compare ranks.

Victims: a job may preempt when it and its priority class allow it; its victims by priority are
preemptible jobs of lower priority of its own team (of any team when the policy's preemption scope is the
cluster), past their class's minimum runtime (``victim_index`` keeps them in preference order).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import fields, replace
from operator import attrgetter

from scheduler.core.plugins.fairshare import fair_share_factors
from scheduler.core.types import JobInfo, PriorityClassInfo, Snapshot

NAME = "priority"
SortKey = Callable[[JobInfo], tuple]


def order(snapshot: Snapshot) -> SortKey:
    """The queue-order key for ``snapshot.policy``."""
    ordering = snapshot.policy.ordering
    if ordering == "fairshare":
        factors = fair_share_factors(snapshot)
        return lambda j: (-j.priority, factors.get(j.team, 0.0), j.submitted_at, j.id)
    if ordering == "las":
        if snapshot.policy.las_thresholds_gpu_s:  # levels are already in the ranked priority
            return lambda j: (-j.priority, j.submitted_at, j.id)
        return lambda j: (-j.priority, j.attained_gpu_s, j.submitted_at, j.id)
    if ordering == "fifo":
        return lambda j: (-j.priority, j.submitted_at, j.id)
    raise ValueError(f"unknown ordering {ordering!r}; allowed: fairshare, fifo, las")


def las_level(attained_gpu_s: float, thresholds: tuple[float, ...]) -> int:
    """The service level of a job that has received ``attained_gpu_s``: how many thresholds it passed."""
    return bisect_right(thresholds, attained_gpu_s)


def ranked(snapshot: Snapshot) -> Snapshot:
    """The snapshot the engine schedules: with discretized LAS, each job's ``priority`` becomes its rank
    (see the module docstring). Otherwise ``snapshot`` itself."""
    policy = snapshot.policy
    thresholds = policy.las_thresholds_gpu_s
    if policy.ordering != "las" or not thresholds:
        return snapshot
    if list(thresholds) != sorted(thresholds):
        raise ValueError(f"las_thresholds_gpu_s must ascend, got {thresholds}")
    levels = len(thresholds) + 1
    jobs = []
    for j in snapshot.jobs:
        rank = j.priority * levels + levels - 1 - las_level(j.attained_gpu_s, thresholds)
        values = list(_job_values(j))
        values[_PRIORITY_AT] = rank
        jobs.append(JobInfo(*values))
    return replace(snapshot, jobs=tuple(jobs))


def may_preempt(job: JobInfo, classes: dict[str, PriorityClassInfo]) -> bool:
    """Whether ``job`` may preempt at all (its own flag and its priority class's)."""
    if not job.may_preempt:
        return False
    cls = classes.get(job.priority_class)
    return cls is None or cls.may_preempt


_JOB_FIELDS = tuple(f.name for f in fields(JobInfo))
_job_values = attrgetter(*_JOB_FIELDS)
_PRIORITY_AT = _JOB_FIELDS.index("priority")
