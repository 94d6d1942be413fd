"""The release timeline: when running jobs free their devices, for backfill reservations and estimates.

EASY backfill: the first job in a group's queue that cannot start gets a *reservation*: the earliest
time ``T`` at which enough of the group's nodes free up, and on each reserved node the ``slack`` (free
devices at ``T`` beyond what the reserved job needs). Later jobs may start now on a reserved node only if
they end by ``T`` (their time limit says so) or take no more than the slack. Without backfill, the first
blocked job of a group blocks the whole group (strict order).

Estimated starts: a per-group count profile (free devices now, plus releases in time order) is walked in
queue order; each waiting job consumes what it needs at the time it would start and releases it at the
end of its time limit. Jobs whose start depends on a job without a time limit get ``None`` (unknown).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field

from scheduler.core.cluster import EPS, Cluster, Group, Held, Node
from scheduler.core.placement import Request, part_sizes
from scheduler.core.types import JobInfo, PriorityClassInfo


@dataclass(slots=True)
class Reservation:
    """Capacity held for ``job_id`` from ``start``: per reserved node, the devices others may still take."""

    job_id: int
    start: float
    slack: dict[int, float] = field(default_factory=dict)  # node order -> devices spare at ``start``
    borrowing: bool = False  # the job would hold more than its team's guarantee (see actions.backfill.vetoed)


def end_time(job: JobInfo, now: float, classes: dict[str, PriorityClassInfo]) -> float | None:
    """When a running job will have released its devices at the latest; None when unknown."""
    if job.terminating:
        cls = classes.get(job.priority_class)
        return now + (cls.grace_period_s if cls else 30.0)
    if job.time_limit_s is None or job.started_at is None:
        return None
    return max(job.started_at + job.time_limit_s, now)


class Timeline:
    """Future releases of devices, per node and per group, from the running jobs of a snapshot."""

    def __init__(self, cluster: Cluster, now: float, classes: dict[str, PriorityClassInfo]):
        self.now = now
        self.cluster = cluster
        # (pool, model) -> releases (time, GPUs); running jobs without a known end are left out.
        self.group_events: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
        self._ending: list[tuple[float, Held]] = []  # running jobs with a known end
        for h in cluster.held:
            end = end_time(h.job, now, classes)
            if end is not None:
                self._ending.append((end, h))
                for key, amount in h.amounts.items():
                    self.group_events[key].append((end, amount))
        self._by_node: dict[str, list[tuple[float, dict[int, float]]]] | None = None
        self.profiles: dict[tuple[str, str], Profile] = {}

    def by_node(self) -> dict[str, list[tuple[float, dict[int, float]]]]:
        """Per node: (time, {device id: share}) releases in time order (built on first use)."""
        if self._by_node is None:
            out: dict[str, list[tuple[float, dict[int, float]]]] = defaultdict(list)
            devices = self.cluster.devices
            for end, h in self._ending:
                per_node: dict[str, dict[int, float]] = defaultdict(dict)
                for gpu_id, share in h.shares.items():
                    per_node[devices[gpu_id].node.name][gpu_id] = share
                for name, shares in per_node.items():
                    out[name].append((end, shares))
            for events in out.values():
                events.sort(key=lambda e: e[0])
            self._by_node = out
        return self._by_node

    def reserve(self, group: Group, req: Request, job_id: int,
                blocks: list[frozenset[int]] | None = None) -> Reservation | None:
        """The earliest start for ``req`` in ``group`` and the slack it leaves; None when unknown.

        The job's shape (``part_sizes``: one node, a gang's members, or the fewest nodes for a job larger
        than any node) is reserved part by part, largest first, each on the node that frees enough
        devices earliest among those not taken yet; the start is the latest of those times. ``blocks``
        (node orders per topology block, for a gang bound to one): the reservation inside one block, the
        earliest of them (ties: the first)."""
        parts = part_sizes(req, group)
        if not parts:
            return None
        options: dict[int, list[tuple[float, int, float]]] = {}
        nodes = self.cluster.node_by_order
        # Every device of the model is large enough: the group's index already counts each node's free ones.
        counted = group.count if req.min_memory_mb <= group.min_memory_mb else None
        for need in sorted(set(parts)):
            found = []
            for order, healthy in self.cluster.sched[(group.pool, group.model)]:  # schedulable nodes
                got = self._when(nodes[order], healthy, need, req, counted.get(order) if counted else None)
                if got is not None:
                    found.append((got[0], order, got[1]))
            found.sort()
            options[need] = found
        if blocks is None:
            return self._pick(parts, options, None, job_id)
        inside = [r for r in (self._pick(parts, options, block, job_id) for block in blocks) if r is not None]
        return min(inside, key=lambda r: r.start, default=None)

    def _pick(self, parts: tuple[int, ...], options: dict[int, list[tuple[float, int, float]]],
              within: frozenset[int] | None, job_id: int) -> Reservation | None:
        """Each part on the node (of ``within``, when given) that frees enough devices earliest."""
        res = Reservation(job_id, self.now)
        for need in parts:
            pick = next((o for o in options[need] if o[1] not in res.slack and (within is None or o[1] in within)),
                        None)
            if pick is None:
                return None
            res.start = max(res.start, pick[0])
            res.slack[pick[1]] = max(pick[2] - need, 0.0)
        return res

    def _when(self, node: Node, healthy: list, need: int, req: Request,
              free: int | None) -> tuple[float, float] | None:
        """(time when ``need`` of the node's ``healthy`` devices are free, devices free then), or None (never
        known). ``free``: how many of them are free now, when the caller knows and none is too small."""
        usable = healthy if free is not None else [d for d in healthy if d.memory_mb >= req.min_memory_mb]
        if len(usable) < need:
            return None
        count = free if free is not None else sum(1 for d in usable if d.free > 1.0 - EPS)
        if count >= need:
            return self.now, float(count)
        events = self.by_node().get(node.name)
        if not events:  # nothing on it is known to end
            return None
        devs = {d.id: d.free for d in usable}
        last = len(events) - 1
        for i, (t, shares) in enumerate(events):
            for dev_id, share in shares.items():
                old = devs.get(dev_id)
                if old is not None:
                    new = devs[dev_id] = old + share
                    count += (new > 1.0 - EPS) - (old > 1.0 - EPS)  # keep the count of free devices current
            # Every release at ``t`` counts (jobs ending at the same moment come in snapshot order).
            if count >= need and (i == last or events[i + 1][0] > t):
                return t, float(count)
        return None

    def profile(self, group: Group) -> Profile:
        """The group's count profile for estimated starts (built on first use)."""
        key = (group.pool, group.model)
        prof = self.profiles.get(key)
        if prof is None:
            free = sum(d.free for n in group.nodes if n.schedulable
                       for d in n.by_model.get(group.model, ()) if d.healthy)
            prof = self.profiles[key] = Profile(self.now, free, self.group_events.get(key, []))
        return prof


class Profile:
    """Free capacity of one group over time, consumed in queue order by waiting jobs' estimates."""

    __slots__ = ("available", "events", "time")

    def __init__(self, now: float, available: float, events: list[tuple[float, float]]):
        self.time = now
        self.available = available
        self.events = list(events)
        heapq.heapify(self.events)

    def estimate(self, amount: float, duration: float | None, not_before: float | None = None) -> float | None:
        """When ``amount`` could start (then hold it for ``duration``); None when releases are unknown."""
        if not_before is not None and not_before > self.time:
            # A reservation knows better; move the profile's clock to it, releasing what ends by then.
            while self.events and self.events[0][0] <= not_before:
                self.available += heapq.heappop(self.events)[1]
            self.time = not_before
        while self.available < amount - EPS:
            if not self.events:
                return None
            t, share = heapq.heappop(self.events)
            self.available += share
            if t > self.time:
                self.time = t
        self.available -= amount
        if duration is not None:
            heapq.heappush(self.events, (self.time + duration, amount))
        return self.time
