"""Queue order: priority first (higher ``priority`` value first), then the policy's order inside a
priority: arrival (fifo), the team's decayed usage relative to its entitlement, then arrival (fairshare),
or least attained service, then arrival (las). Job id breaks every remaining tie, so order is total.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import fields, replace
from operator import attrgetter

from scheduler.core.types import JobInfo, Snapshot

SortKey = Callable[[JobInfo], tuple]


def entitlements(snapshot: Snapshot) -> dict[str, float]:
    """Each team's entitlement: the sum of its guaranteed GPUs, else the sum of its quota weights."""
    guaranteed: dict[str, float] = {}
    weight: dict[str, float] = {}
    for q in snapshot.quotas:
        guaranteed[q.team] = guaranteed.get(q.team, 0.0) + max(q.guaranteed, 0.0)
        weight[q.team] = weight.get(q.team, 0.0) + max(q.weight, 0.0)
    out = {}
    for team in set(guaranteed) | set(weight):
        out[team] = guaranteed.get(team, 0.0) or weight.get(team, 0.0)
    return out


def fair_share_factors(snapshot: Snapshot) -> dict[str, float]:
    """Decayed usage (GPU-seconds, from ``snapshot.usage``) divided by entitlement; lower runs first.

    A team without entitlement but with usage sorts after every entitled team of equal usage. Teams with
    neither are left out: their factor is 0, the sort key's default.
    """
    ent = entitlements(snapshot)
    out = {}
    for team in set(ent) | set(snapshot.usage):
        usage = max(float(snapshot.usage.get(team, 0.0)), 0.0)
        e = ent.get(team, 0.0)
        out[team] = usage / e if e > 0 else (usage * 1e6 if usage else 0.0)
    return out


def sort_key(snapshot: Snapshot) -> SortKey:
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
    """The snapshot the engine schedules: with discretized LAS, each job's ``priority`` becomes its rank,
    priority first, then service level (fewer passed thresholds rank higher), so queue order, victim
    choice and the preemption rules compare ranks. Otherwise ``snapshot`` itself."""
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


_JOB_FIELDS = tuple(f.name for f in fields(JobInfo))
_job_values = attrgetter(*_JOB_FIELDS)
_PRIORITY_AT = _JOB_FIELDS.index("priority")
