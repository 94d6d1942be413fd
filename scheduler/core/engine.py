"""One scheduling cycle: ``schedule(snapshot) -> Decisions``.

The shape follows Volcano/KAI: build a working copy of the cluster (``Cluster``) and of quota usage
(``QuotaBook``), walk the queue in policy order, and for each waiting job either start it, plan
preemptions for it, or record why it waits. Everything is deterministic: inputs are sorted, ties break on
job id, node name and device index, and no clock is read (time is ``snapshot.now``).
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.core import reasons as R
from scheduler.core.cluster import EPS, Cluster
from scheduler.core.feasibility import Feasibility, analyse, shape_text
from scheduler.core.ordering import sort_key
from scheduler.core.placement import Request, place, request_of
from scheduler.core.quota import QuotaBook
from scheduler.core.types import (
    HELD,
    PENDING,
    Decisions,
    JobInfo,
    PendingInfo,
    Reason,
    Snapshot,
    Start,
)

Timer = Callable[[str], None]


class Cycle:
    """The working state of one cycle (a session, in Volcano's words)."""

    def __init__(self, snapshot: Snapshot):
        self.snapshot = snapshot
        self.policy = snapshot.policy
        self.cluster = Cluster(snapshot)
        devices = self.cluster.devices
        self.quota = QuotaBook(
            snapshot,
            {i: d.node.pool for i, d in devices.items()},
            {i: d.model for i, d in devices.items()},
        )
        self.pools = sorted({n.pool for n in snapshot.nodes})
        self.team_pools = {t.name: t.pools for t in snapshot.teams if t.pools}
        self.models_in_cluster = sorted({m for (_p, m) in self.cluster.groups})
        self.starts: list[Start] = []
        self.waiting: list[tuple[JobInfo, Reason, float | None]] = []
        self.stats: dict[str, int] = {}
        self._feasible: dict[tuple, Feasibility] = {}
        self._quota_blocked: dict[tuple, Reason] = {}
        self._full: set[tuple] = set()

    def bump(self, counter: str, by: int = 1) -> None:
        """Count something for ``Decisions.stats``."""
        self.stats[counter] = self.stats.get(counter, 0) + by

    # -- static part -------------------------------------------------------------------------------

    def feasibility(self, job: JobInfo, req: Request) -> Feasibility:
        """Groups that could ever hold the job (cached per team/pool/models/request shape)."""
        key = (job.team, job.pool, job.gpu_models, req)
        hit = self._feasible.get(key)
        if hit is not None:
            return hit
        allowed = self.team_pools.get(job.team)
        if job.pool is not None:
            if allowed is not None and job.pool not in allowed:
                res = Feasibility((), R.reason(
                    R.NO_MATCHING_POOL,
                    f"team {job.team} may not use pool {job.pool} (allowed: {', '.join(sorted(allowed))})",
                    team=job.team, pool=job.pool, allowed=sorted(allowed)))
            elif job.pool not in self.pools:
                res = Feasibility((), R.reason(R.NO_MATCHING_POOL, f"no pool named {job.pool} has nodes",
                                               pool=job.pool))
            else:
                res = self._analyse(job, req, [job.pool])
        else:
            pools = [p for p in self.pools if allowed is None or p in allowed]
            if not pools:
                res = Feasibility((), R.reason(
                    R.NO_MATCHING_POOL, f"team {job.team} may not use any pool that has nodes",
                    team=job.team, allowed=sorted(allowed or ())))
            else:
                res = self._analyse(job, req, pools)
        self._feasible[key] = res
        return res

    def _analyse(self, job: JobInfo, req: Request, pools: list[str]) -> Feasibility:
        models = list(job.gpu_models)
        if not models:
            models = sorted(self.quota.models_of_team.get(job.team, ())) or self.models_in_cluster
        return analyse(self.cluster, job, req, pools, models)

    # -- per job -----------------------------------------------------------------------------------

    def try_job(self, job: JobInfo) -> None:
        """Start ``job`` or record why it waits."""
        if job.state == HELD:
            self.waiting.append((job, _HELD_REASON, None))
            return
        req = request_of(job)
        if req.gpus <= 0:
            self.waiting.append((job, R.reason(R.UNSATISFIABLE, "the job requests no GPUs",
                                               constraint="gpus", requested=job.gpus), None))
            return
        feas = self.feasibility(job, req)
        if feas.reason is not None:
            self.waiting.append((job, feas.reason, None))
            return
        amount = req.amount
        spread = self.policy.placement == "spread" or job.kind == "inference"
        quota_reason: Reason | None = None
        best_group = None
        for group in feas.groups:
            qkey = (job.team, group.model, group.pool, amount)
            blocked = self._quota_blocked.get(qkey)
            if blocked is None:
                blocked = self.quota.check_limit(job.team, group.model, group.pool, amount)
                if blocked is not None:
                    self._quota_blocked[qkey] = blocked
            if blocked is not None:
                quota_reason = quota_reason or blocked
                continue
            if best_group is None:
                best_group = group
            fkey = (id(group), req)
            if fkey in self._full:
                continue
            self.bump("placement_searches")
            placements = place(self.cluster, group, req, spread)
            if placements is None:
                self._full.add(fkey)
                continue
            self.cluster.take(job, placements)
            self.quota.charge(job.team, group.model, group.pool, amount)
            self.starts.append(Start(job.id, placements))
            return
        if best_group is None:
            self.waiting.append((job, quota_reason, None))
            return
        self.waiting.append((job, self._resources_reason(job, req, best_group), None))

    def _resources_reason(self, job: JobInfo, req: Request, group) -> Reason:
        most = group.max_free()
        total = group.total_free()
        return R.reason(
            R.RESOURCES,
            f"needs {shape_text(req)} of {group.model} in pool {group.pool}; "
            f"the freest node has {most} free ({total} free in the pool)",
            gpu_model=group.model, pool=group.pool, requested=R.num(req.amount), most_free_on_a_node=most,
            free_in_pool=total,
        )


_HELD_REASON = R.reason(R.HELD, "held: the scheduler skips this job until it is released")


def schedule(snapshot: Snapshot, timer: Timer | None = None) -> Decisions:
    """Run one scheduling cycle over ``snapshot`` and return what to start, preempt and report.

    Deterministic: the same snapshot always gives the same decisions. ``timer``, when given, is called
    with a phase name as each phase ends (the core reads no clock; callers measure).
    """
    cycle = Cycle(snapshot)
    if timer:
        timer("index")
    key = sort_key(snapshot)
    queue = sorted((j for j in snapshot.jobs if j.state == PENDING or j.state == HELD), key=key)
    if timer:
        timer("order")
    for job in queue:
        cycle.try_job(job)
    if timer:
        timer("place")
    pending = tuple(
        PendingInfo(job.id, reason, pos, est) for pos, (job, reason, est) in enumerate(cycle.waiting, start=1)
    )
    cycle.bump("started", len(cycle.starts))
    cycle.bump("pending", len(pending))
    decisions = Decisions(starts=tuple(cycle.starts), pending=pending, stats=dict(sorted(cycle.stats.items())))
    if timer:
        timer("report")
    return decisions


__all__ = ["EPS", "schedule"]
