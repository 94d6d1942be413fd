"""Figures of merit for one replay, as a JSON-ready dict (seconds, GPUs, GPU-hours, ratios).

Definitions (all over jobs that finished unless said otherwise):

* JCT = end - submit; queueing delay = first start - submit; the JCT lower bound is the mean duration.
* utilization = GPU-seconds of trace work done inside the window ``[0, span)`` / (capacity x span);
  ``utilization_allocated`` also counts GPU time lost to preemption. The bound is
  ``min(1, offered GPU-seconds / (capacity x span))``.
* received share: a team's share of the GPU-seconds held while jobs were waiting (when sharing matters),
  next to its entitlement (share of all guarantees) and its offered share (of the trace's GPU-seconds).
* ``jain_slowdown``: Jain's index over teams of 1 / mean bounded slowdown (JCT / max(duration, 10 s),
  at least 1); 1.0 means every team waits in the same proportion to its work.
  ``jain_share``: Jain's index over teams with a guarantee of received share / entitlement share.
* starvation: seconds a team had a waiting job that fit in the unused part of its guarantee (in total,
  and its longest unbroken stretch: how long reaching the guarantee took at worst); ``worst_starved_s``
  and ``longest_starved_s`` are the largest over teams.
"""

from __future__ import annotations

import math

from scheduler.sim.results import JobRecord, SimResult

SLOWDOWN_FLOOR_S = 10.0


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between ranks; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def jain_index(values: list[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1.0 when all equal, 1/n when one takes all."""
    square_sum = sum(v * v for v in values)
    if not values or square_sum == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * square_sum)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _slowdown(job: JobRecord) -> float:
    return max(1.0, (job.jct or 0.0) / max(job.duration, SLOWDOWN_FLOOR_S))


def _stats(prefix: str, values: list[float]) -> dict[str, float]:
    return {
        f"avg_{prefix}_s": _mean(values),
        f"p50_{prefix}_s": percentile(values, 50),
        f"p95_{prefix}_s": percentile(values, 95),
        f"p99_{prefix}_s": percentile(values, 99),
    }


def _teams(
    result: SimResult, finished: list[JobRecord]
) -> tuple[dict[str, dict[str, float]], list[float], list[float]]:
    """Per-team figures and the inputs of the two Jain indexes."""
    offered: dict[str, float] = {}
    for job in result.jobs:
        offered[job.team] = offered.get(job.team, 0.0) + job.duration * job.gpus
    by_team: dict[str, list[JobRecord]] = {}
    for job in finished:
        by_team.setdefault(job.team, []).append(job)
    total_offered = sum(offered.values()) or 1.0
    total_guaranteed = sum(result.guaranteed.values())
    total_contended = sum(figures[0] for figures in result.teams.values()) or 1.0
    teams: dict[str, dict[str, float]] = {}
    slowdown_x: list[float] = []
    share_x: list[float] = []
    for team in sorted(set(offered) | set(result.teams)):
        contended, starved, longest = result.teams.get(team, (0.0, 0.0, 0.0))
        jobs = by_team.get(team, [])
        entitlement = result.guaranteed.get(team, 0.0) / total_guaranteed if total_guaranteed else 0.0
        slowdown = _mean([_slowdown(j) for j in jobs])
        teams[team] = {
            "jobs": len(jobs),
            "avg_jct_s": _mean([j.jct or 0.0 for j in jobs]),
            "avg_queue_s": _mean([j.queue_delay or 0.0 for j in jobs]),
            "avg_slowdown": slowdown,
            "guaranteed_gpus": result.guaranteed.get(team, 0.0),
            "entitlement_share": entitlement,
            "offered_share": offered.get(team, 0.0) / total_offered,
            "received_share": contended / total_contended,
            "starved_s": starved,
            "longest_starved_s": longest,
            "preemptions": sum(j.preemptions for j in jobs),
        }
        if jobs:
            slowdown_x.append(1.0 / slowdown)
        if entitlement > 0 and offered.get(team):
            share_x.append(teams[team]["received_share"] / entitlement)
    return teams, slowdown_x, share_x


def summarize(result: SimResult, *, packing: bool = False) -> dict[str, object]:
    """All figures of one replay (see the module docstring); ``packing`` adds unallocated-GPU figures."""
    finished = [job for job in result.jobs if job.end is not None]
    jcts = [job.jct for job in finished if job.jct is not None]
    delays = [job.queue_delay for job in result.jobs if job.queue_delay is not None]
    capacity_s = result.capacity * result.span_s
    teams, slowdown_x, share_x = _teams(result, finished)
    summary: dict[str, object] = {
        "policy": result.policy,
        "jobs": len(result.jobs) + result.unarrived,
        "completed": sum(1 for job in finished if job.outcome == "completed"),
        "timed_out": sum(1 for job in finished if job.outcome == "timed-out"),
        "unfinished": len(result.jobs) + result.unarrived - len(finished),
        **_stats("jct", jcts),
        "jct_lower_bound_s": _mean([job.duration for job in finished]),
        **_stats("queue", delays),
        "makespan_s": (max(job.end for job in finished) - min(job.submit for job in finished))
        if finished
        else 0.0,
        "capacity_gpus": result.capacity,
        "span_s": result.span_s,
        "utilization": result.useful_gpu_s / capacity_s if capacity_s else 0.0,
        "utilization_allocated": result.allocated_gpu_s / capacity_s if capacity_s else 0.0,
        "utilization_bound": min(1.0, result.offered_gpu_s / capacity_s) if capacity_s else 0.0,
        "preemptions": result.preemptions,
        "gpu_hours_lost": result.lost_gpu_s / 3600.0,
        "jain_slowdown": jain_index(slowdown_x),
        "jain_share": jain_index(share_x),
        "worst_starved_s": max((t["starved_s"] for t in teams.values()), default=0.0),
        "longest_starved_s": max((t["longest_starved_s"] for t in teams.values()), default=0.0),
        "quota_violations": result.quota_violations,
        "invariant_violations": result.invariant_violations,
        "apply_errors": result.apply_errors,
        "cycles": result.cycles,
        "skipped_cycles": result.skipped_cycles,
        "engine_s": result.engine_s,
        "check_s": result.check_s,
        "wall_s": result.wall_s,
        "teams": teams,
    }
    if packing:
        summary["packing"] = {
            "peak_allocated_gpus": result.peak_allocated,
            "unallocated_gpus_at_peak": result.capacity - result.peak_allocated,
            "free_gpus_while_pending": result.free_gpus_while_pending,
        }
    examples = result.invariant_examples + result.apply_examples + result.quota_examples
    if examples:
        summary["problems"] = examples
    return summary
