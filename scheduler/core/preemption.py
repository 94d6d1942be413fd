"""Preemption planning: which running jobs to stop so a waiting job can start in a later cycle.

Two rules decide who may be a victim (DESIGN: priority classes and quota):
  * priority: a job of the same team (of any team when the policy's preemption scope is the cluster) with
    a lower priority (the preemptor's class must allow preempting);
  * reclaim: any job of a team holding more than its guarantee of the model, when the preemptor's team
    is within its own guarantee after the start; a lender is never pushed below its guarantee.
Victims must be preemptible, not already terminating, and past their class's minimum runtime; a reclaim
victim must also have run two cycle intervals (hysteresis: work admitted by borrowing is not taken back in
the cycle after it starts, see ``reclaimable_at``). The plan is
the smallest victim set on one node (or per gang member), preferring borrowed work, then lower priority,
most recently started, least work since the last checkpoint. A plan looks at the first ``PLAN_LIMIT``
candidates in that preference order, plus those on the nodes with the most free devices and the jobs
holding the most devices (where small victim sets are). No plan is made when the job still would not fit
after the victims are gone. Victims keep their devices this cycle; the preemptor waits (Preempting).
The actions that use it: ``actions.preempt`` (and ``actions.reclaim``); candidates come from
``victim_index``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.core.cluster import EPS, Cluster, Group, Node
from scheduler.core.placement import Request, best_node, fits_host, part_sizes
from scheduler.core.types import JobInfo, PriorityClassInfo

PRIORITY = "Priority"
RECLAIM = "Reclaim"
PLAN_LIMIT = 64  # victim candidates a plan looks at by preference
NEAR_NODES = 8  # and the nodes with the most free devices whose candidates it looks at too
BIG_JOBS = 8  # and the jobs holding the most devices (for requests of more than one device)


@dataclass(slots=True)
class Running:
    """A running job as preemption sees it: its job and its shares per device."""

    job: JobInfo
    shares: dict[int, float]
    model: str
    nodes: tuple[str, ...]
    pool: str


@dataclass(frozen=True, slots=True)
class Plan:
    """Victims (with the rule used for each) and the devices the preemptor will get."""

    victims: tuple[tuple[Running, str], ...]
    devices: tuple[int, ...]
    free_devices: tuple[int, ...]  # devices idle now that the plan also needs (held back this cycle)


def index_running(cluster: Cluster) -> tuple[dict, dict]:
    """Running, non-terminating jobs by (team, model) and by model; only jobs on known devices."""
    by_team: dict[tuple[str, str], list[Running]] = defaultdict(list)
    by_model: dict[str, list[Running]] = defaultdict(list)
    devices = cluster.devices
    for h in cluster.held:
        job = h.job
        if job.terminating:
            continue
        rec = h.rec
        if rec is None:
            first = devices[next(iter(h.shares))]
            rec = h.rec = Running(job, h.shares, first.model, tuple(n.name for n in h.nodes), first.node.pool)
        by_team[(job.team, rec.model)].append(rec)
        by_model[rec.model].append(rec)
    return by_team, by_model


def req_devices(job: JobInfo) -> int:
    """Whole devices the job asks for (0 for a fraction of one)."""
    return 0 if job.gpu_fraction else job.gpus


def victim_order(rec: Running, borrowed: bool, now: float) -> tuple:
    """Preference among victims: borrowed first, lowest priority, then the least work lost: the shortest time
    since its last checkpoint, or since its start when it has none (so, without checkpoints, the most recent
    start), then the most recent start."""
    job = rec.job
    started = job.started_at if job.started_at is not None else now
    since = job.last_checkpoint_at if job.last_checkpoint_at is not None else started
    return (0 if borrowed else 1, job.priority, now - since, -started, job.id)


def eligible(rec: Running, classes: dict[str, PriorityClassInfo], now: float, taken: set[int]) -> bool:
    """May this job be a victim at all (preemptible, running long enough, not already chosen)?"""
    job = rec.job
    if not job.preemptible or job.terminating or job.id in taken:
        return False
    cls = classes.get(job.priority_class)
    if cls is not None and cls.min_runtime_s > 0 and job.started_at is not None:
        return now - job.started_at >= cls.min_runtime_s - EPS
    return True


def reclaimable_at(job: JobInfo, classes: dict[str, PriorityClassInfo], interval: float) -> float | None:
    """When a running job may first be reclaimed: after its class's minimum runtime and after two cycle
    intervals (the hysteresis: not in the cycle after its start). None: at once (no start time known)."""
    if job.started_at is None:
        return None
    cls = classes.get(job.priority_class)
    min_runtime = cls.min_runtime_s if cls is not None else 0.0
    return job.started_at + max(min_runtime, 2 * interval)


def plan_on_nodes(cluster: Cluster, group: Group, req: Request, candidates: Iterable[tuple[tuple, Running, str]],
                  lender_room: dict[str, float], limit: int = PLAN_LIMIT,
                  within: frozenset[int] | None = None) -> Plan | None:
    """Smallest victim set that frees room for ``req`` in ``group``, or None.

    ``candidates`` come in preference order (key, record, rule); at most ``limit`` are looked at, and
    nodes are evaluated in the order their first candidate appears, stopping at a one-victim plan (the
    smallest possible). A job of several parts (a gang, or a job larger than any node: see
    ``part_sizes``) gets a node per part; parts may also go to nodes that are free already, which the
    plan then holds. ``lender_room`` caps, per team, how much reclaim may take from it. ``within``: only
    these nodes (by order) may hold the job (a gang bound to one topology block).
    """
    parts = part_sizes(req, group)
    if not parts:
        return None
    n_parts = len(parts)
    needs = sorted(set(parts), reverse=True)
    per_node: dict[str, list[tuple[tuple, Running, str]]] = {}
    for i, cand in enumerate(candidates):
        if i >= limit:
            break
        for name in cand[1].nodes:
            got = per_node.get(name)
            if got is None:
                per_node[name] = [cand]
            else:
                got.append(cand)
    options: dict[int, list] = {need: [] for need in needs}
    enough = {need: 4 * parts.count(need) for need in needs}  # options per part size worth comparing
    count = group.count  # whole free devices per schedulable node of the group
    id_sets = group.device_ids
    for name, cands in per_node.items():
        node = cluster.nodes[name]
        if node.pool != group.pool or not node.schedulable or (within is not None and node.order not in within):
            continue
        if not fits_host(node, req, n_parts):
            continue
        freeable = math.inf
        if req.fraction is None:
            devs = node.by_model.get(group.model, ())
            idle = count.get(node.order)
            if idle is None:
                idle = sum(1 for d in devs if d.healthy and d.free > 1.0 - EPS)
            ids = id_sets.get(name)
            if ids is None:
                ids = id_sets[name] = {d.id for d in devs}
            freeable = float(idle)
            for c in cands:
                for dev_id, share in c[1].shares.items():
                    if dev_id in ids:
                        freeable += share
        added = False
        for need in needs:
            if freeable < need - EPS:
                continue
            freed = _free_node(node, group.model, req, need, cands, dict(lender_room))
            if freed is not None:
                options[need].append((len(freed[0]), [c[0] for c in freed[0]], node.order, freed))
                added = True
        if added:
            if n_parts == 1 and options[needs[0]][-1][0] == 1:
                break  # one victim: nothing smaller exists
            if all(len(options[need]) >= enough[need] for need in needs):
                break
    if n_parts > 1:
        _add_free_nodes(cluster, group, req, needs, parts, options, within)
    chosen: list[tuple] = []
    used: set[int] = set()
    for need in needs:
        ranked = sorted(options[need], key=lambda o: (o[0], o[1], o[2]))
        want = parts.count(need)
        for option in ranked:
            if want == 0:
                break
            if option[2] in used:
                continue
            chosen.append(option)
            used.add(option[2])
            want -= 1
        if want:
            return None
    if not any(option[0] for option in chosen):
        return None  # it fits without preemption: the caller's placement search handles it
    victims: dict[int, tuple[Running, str]] = {}
    devices: list[int] = []
    free: list[int] = []
    room = dict(lender_room)
    for _n, _keys, _order, (part_victims, part_devices, part_idle) in chosen:
        for _key, rec, rule in part_victims:
            if rec.job.id not in victims:
                if rule == RECLAIM and rec.job.team in room:
                    if room[rec.job.team] <= EPS:
                        return None  # two parts would reclaim the same lender's last GPUs
                    room[rec.job.team] -= sum(rec.shares.values())
                victims[rec.job.id] = (rec, rule)
        devices.extend(part_devices)
        free.extend(part_idle)
    ordered = tuple(victims[k] for k in sorted(victims))
    return Plan(ordered, tuple(devices), tuple(free))


def _add_free_nodes(cluster: Cluster, group: Group, req: Request, needs: list[int], parts: tuple[int, ...],
                    options: dict[int, list], within: frozenset[int] | None) -> None:
    """Parts of a multi-node job may also go to nodes that already have the devices free (no victims):
    per part size, the best-fitting such nodes (of ``within``, when given), as many as the job has parts."""
    n_parts = len(parts)
    outside = set(group.count) - within if within is not None else set()
    for need in needs:
        seen: list[int] = []
        while len(seen) < n_parts:
            found = best_node(cluster, group, req, need, n_parts, False, None, exclude=outside.union(seen))
            if found is None:
                break
            node, devs = found
            seen.append(node.order)
            ids = [d.id for d in devs]
            options[need].append((0, [], node.order, ([], ids, ids)))


def _free_node(node: Node, model: str, req: Request, need: int, cands: list[tuple[tuple, Running, str]],
               room: dict[str, float]) -> tuple[list[tuple[tuple, Running, str]], list[int], list[int]] | None:
    """Victims on one node until ``need`` devices (or one share) are free: take candidates in preference
    order, then drop any that turn out unnecessary (the smallest set wins over preference)."""
    devs = [d for d in node.by_model.get(model, ()) if d.healthy and d.memory_mb >= req.min_memory_mb]
    if len(devs) < need:
        return None
    base = {d.id: d.free for d in devs}
    ids = sorted(base)

    def fits(chosen: Iterable[tuple[tuple, Running, str]]) -> list[int] | None:
        free = dict(base)
        for _key, rec, _rule in chosen:
            for dev_id, share in rec.shares.items():
                if dev_id in free:
                    free[dev_id] += share
        if req.fraction is not None:
            return [i for i in ids if free[i] >= req.fraction - EPS][:1] or None
        ok = [i for i in ids if free[i] > 1.0 - EPS]
        return ok[:need] if len(ok) >= need else None

    if fits(()):
        return None  # it fits without preemption: the caller's placement search handles it
    chosen: list[tuple[tuple, Running, str]] = []
    got: list[int] | None = None
    for cand in cands:
        _key, rec, rule = cand
        if not any(dev_id in base for dev_id in rec.shares):
            continue
        if rule == RECLAIM and rec.job.team in room:
            if room[rec.job.team] <= EPS:
                continue
            room[rec.job.team] -= sum(rec.shares.values())
        chosen.append(cand)
        got = fits(chosen)
        if got:
            break
    if not got:
        return None
    for cand in list(chosen[:-1]):
        trial = [c for c in chosen if c is not cand]
        again = fits(trial)
        if again:
            chosen, got = trial, again
    idle = [i for i in got if all(i not in c[1].shares for c in chosen)]
    return chosen, got, idle
