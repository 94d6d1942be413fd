"""A tiny stand-in policy for testing the event loop without the real engine.

Strict first-come-first-served, first fit, whole nodes for multi-node jobs; optionally preempts the
newest running job when the head of the queue is blocked (to exercise the preemption path).
"""

from __future__ import annotations

from scheduler.core.types import (
    PENDING,
    Decisions,
    PendingInfo,
    Placement,
    Preemption,
    Reason,
    Snapshot,
    Start,
)


def fifo_first_fit(snapshot: Snapshot, *, preempt: bool = False, backfill: bool = False) -> Decisions:
    """Start waiting jobs in arrival order where they fit; stop at the first that does not (no backfill)."""
    used: dict[int, float] = {}
    for job in snapshot.jobs:
        for p in job.placements:
            used[p.gpu_id] = used.get(p.gpu_id, 0.0) + p.share
    starts: list[Start] = []
    pending: list[PendingInfo] = []
    preemptions: list[Preemption] = []
    queue = sorted((j for j in snapshot.jobs if j.state == PENDING), key=lambda j: (j.submitted_at, j.id))
    blocked = False
    for job in queue:
        placements = None if blocked and not backfill else _fit(snapshot, used, job.gpus, job.gpu_fraction)
        if placements is None:
            if not blocked and preempt and not any(j.terminating for j in snapshot.jobs):
                victims = sorted(
                    (j for j in snapshot.jobs if j.placements and j.submitted_at > job.submitted_at),
                    key=lambda j: (-j.submitted_at, j.id),
                )
                if victims:
                    preemptions.append(
                        Preemption(victims[0].id, job.id, "Priority", "toy", grace_period_s=30)
                    )
            blocked = True
            pending.append(PendingInfo(job.id, Reason("Resources", "no room"), len(pending) + 1))
            continue
        for p in placements:
            used[p.gpu_id] = used.get(p.gpu_id, 0.0) + p.share
        starts.append(Start(job.id, placements))
    return Decisions(starts=tuple(starts), preemptions=tuple(preemptions), pending=tuple(pending))


def _fit(
    snapshot: Snapshot, used: dict[int, float], gpus: int, fraction: float | None
) -> tuple[Placement, ...] | None:
    share = fraction if fraction is not None else 1.0
    if gpus <= max(len(n.gpus) for n in snapshot.nodes):
        for node in snapshot.nodes:
            free = [g for g in node.gpus if used.get(g.id, 0.0) + share <= 1.0 + 1e-9]
            if len(free) >= gpus:
                return tuple(Placement(g.id, share) for g in free[:gpus])
        return None
    whole = [n for n in snapshot.nodes if all(used.get(g.id, 0.0) == 0 for g in n.gpus)]
    chosen: list[Placement] = []
    for node in whole:
        chosen.extend(Placement(g.id) for g in node.gpus)
        if len(chosen) >= gpus:
            return tuple(chosen[:gpus])
    return None


def no_violations(snapshot: Snapshot, decisions: Decisions) -> list[str]:
    """An invariant checker that finds nothing (the toy policy is checked by the simulator itself)."""
    return []
