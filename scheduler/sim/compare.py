"""Per-team outcomes of a replay, in the same shape as the live history's, for what-if comparisons."""

from __future__ import annotations

from scheduler.sim.metrics import percentile
from scheduler.sim.results import SimResult


def team_outcomes(result: SimResult) -> dict[str, dict[str, float]]:
    """For each team: jobs, jobs finished, average and p95 wait before the first start (seconds),
    GPU-hours of work received (finished and partial), and preemptions suffered."""
    by_team: dict[str, list] = {}
    for job in result.jobs:
        by_team.setdefault(job.team, []).append(job)
    out: dict[str, dict[str, float]] = {}
    for team, jobs in sorted(by_team.items()):
        waits = [j.queue_delay for j in jobs if j.queue_delay is not None]
        gpu_s = 0.0
        for j in jobs:  # work done by the end of the replay (a replay may stop before every job ends)
            if j.end is not None:
                gpu_s += j.gpus * j.duration
            elif j.first_start is not None:
                gpu_s += j.gpus * max(0.0, min(j.duration, result.end_s - j.first_start))
        out[team] = {
            "jobs": float(len(jobs)),
            "finished": float(sum(1 for j in jobs if j.end is not None)),
            "avg_wait_s": sum(waits) / len(waits) if waits else 0.0,
            "p95_wait_s": percentile(waits, 95) if waits else 0.0,
            "gpu_hours": gpu_s / 3600.0,
            "preemptions": float(sum(j.preemptions for j in jobs)),
        }
    return out
