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
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scheduler.core import reasons as R
from scheduler.core.cluster import EPS, Cluster, Group, Node
from scheduler.core.feasibility import shape_text
from scheduler.core.placement import Request, best_node, fits_host, part_sizes
from scheduler.core.types import JobInfo, Placement, Policy, Preemption, PriorityClassInfo, Reason

if TYPE_CHECKING:
    from scheduler.core.quota import QuotaBook

PRIORITY = "Priority"
RECLAIM = "Reclaim"
PLAN_LIMIT = 64  # victim candidates a plan looks at by preference
NEAR_NODES = 8  # and the nodes with the most free devices whose candidates it looks at too
BIG_JOBS = 8  # and the jobs holding the most devices (for requests of more than one device)
_NO_SHARES: dict[int, float] = {}  # read only: a node without stopping jobs


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
    """Preference among victims: borrowed first, lowest priority, most recent start, least lost work."""
    job = rec.job
    started = job.started_at if job.started_at is not None else now
    since = job.last_checkpoint_at if job.last_checkpoint_at is not None else started
    return (0 if borrowed else 1, job.priority, -started, now - since, job.id)


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
                  lender_room: dict[str, float], limit: int = PLAN_LIMIT) -> Plan | None:
    """Smallest victim set that frees room for ``req`` in ``group``, or None.

    ``candidates`` come in preference order (key, record, rule); at most ``limit`` are looked at, and
    nodes are evaluated in the order their first candidate appears, stopping at a one-victim plan (the
    smallest possible). A job of several parts (a gang, or a job larger than any node: see
    ``part_sizes``) gets a node per part; parts may also go to nodes that are free already, which the
    plan then holds. ``lender_room`` caps, per team, how much reclaim may take from it.
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
        if node.pool != group.pool or not node.schedulable:
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
        _add_free_nodes(cluster, group, req, needs, parts, options)
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
                    options: dict[int, list]) -> None:
    """Parts of a multi-node job may also go to nodes that already have the devices free (no victims):
    per part size, the best-fitting such nodes, as many as the job has parts."""
    n_parts = len(parts)
    for need in needs:
        seen: list[int] = []
        while len(seen) < n_parts:
            found = best_node(cluster, group, req, need, n_parts, False, None, exclude=seen)
            if found is None:
                break
            node, devs = found
            seen.append(node.order)
            ids = [d.id for d in devs]
            options[need].append((0, [], node.order, ([], ids, ids)))


def _first(item: tuple) -> tuple:
    return item[0]


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


class Preempting:
    """The preemption half of a scheduling cycle (mixed into ``engine.Cycle``, whose state it uses):
    claim devices of stopping jobs, plan victims for a waiting job, and commit a plan."""

    # The cycle's state this half reads and changes; ``engine.Cycle.__init__`` sets it.
    now: float
    policy: Policy
    classes: dict[str, PriorityClassInfo]
    cycle_interval_s: float  # the snapshot's (see reclaimable_at)
    cluster: Cluster
    quota: QuotaBook
    free_of_model: dict[str, float]  # idle healthy capacity on schedulable nodes, per model
    nl_teams: dict[str, list[str]]  # per model, the teams with a never-lent part of their guarantee
    running_by_team: dict[tuple[str, str], list[Running]]
    running_by_model: dict[str, list[Running]]
    stopping: dict[str, dict[int, float]]  # devices of terminating jobs, per node: share held
    preemptions: list[Preemption]
    victims: set[int]
    preempting_eta: dict[int, float]
    claims: int  # devices of stopping jobs claimed so far
    _young: dict[tuple[str, str], list]  # see _young_in
    _no_claim: dict[tuple, tuple[int, int]]  # see _claim_stopping
    _stopping_nodes: dict[tuple, list]  # see _claimable
    _stopping_max: dict[int, int]  # see _stopping_most
    _no_plan: set[tuple]
    # Reclaim serves only guaranteed work the walk admits ahead of borrowing (the first pass of
    # ``guarantee_first``); the engine closes it for the deferred pass. A job deferred behind its team's
    # borrowing head waits for that head: were it to reclaim, the devices it frees would be claimed or
    # taken by the borrowers walked before it, and it would reclaim again next cycle (ping-pong).
    reclaim_open: bool

    def wait(self, job: JobInfo, reason: Reason, group: Group | None = None, req: Request | None = None) -> None:
        raise NotImplementedError  # engine.Cycle records why a job waits

    def _scope_of(self, job: JobInfo) -> str | None:
        """The key of the victim list ``job`` may preempt by priority: its team's, or everyone's (None)."""
        return None if self.policy.preemption_scope == "cluster" else job.team

    def _may_preempt(self, job: JobInfo) -> bool:
        if not job.may_preempt:
            return False
        cls = self.classes.get(job.priority_class)
        return cls is None or cls.may_preempt

    def _try_preempt(self, job: JobInfo, req: Request, groups: tuple[Group, ...], allowed: list[Group]) -> bool:
        """Claim devices of stopping jobs, or plan new preemptions; True when the job now waits for them.

        ``allowed``: the groups of ``groups`` whose quota check passed (the caller just made them)."""
        if self.stopping:
            for group in allowed:
                if self._claim_stopping(job, req, group):
                    return True
        for group in groups:
            key = (job.team, job.priority, job.preemptible, id(group), id(req))
            if key in self._no_plan:
                continue
            if group not in allowed and not self._credit_may_admit(job, req, group):
                self._no_plan.add(key)
                continue
            plan = self._plan(job, req, group)
            if plan is None:
                self._no_plan.add(key)
                continue
            self._commit_plan(job, req, group, plan)
            return True
        return False

    def _credit_may_admit(self, job: JobInfo, req: Request, group: Group) -> bool:
        """For a group the quota refused: whether a plan could pass the quota at all. Only the job's own
        team's victims give credit back, and credit cannot make room for non-preemptible work (it must fit
        the guarantee beside the team's other non-preemptible work) nor create a missing quota row; so
        without such victims, or in those cases, ``_plan`` would search victims only to fail its quota
        check (the check is the refusal the walk just saw)."""
        quota = self.quota
        model = group.model
        if quota.row(job.team, model, group.pool) is None:
            return False
        if not job.preemptible and (quota.non_preemptible.get((job.team, model), 0.0) + req.amount
                                    > quota.guaranteed.get((job.team, model), 0.0) + EPS):
            return False
        pool, now, classes, taken = group.pool, self.now, self.classes, self.victims
        return any(r.job.priority < job.priority and r.pool == pool and eligible(r, classes, now, taken)
                   for r in self.running_by_team.get((job.team, model), ()))

    def _claim_stopping(self, job: JobInfo, req: Request, group: Group) -> bool:
        """If devices of terminating jobs (e.g. earlier victims) make the job fit, hold them for it.

        Each part of the job (see ``part_sizes``) takes a node whose idle devices plus those being
        released are enough, nodes with releases first (in name order), then already free nodes; at
        least one part must use released devices (else it fits now, or not at all)."""
        # Remembered when it fails, until a claim or a change in the group (nothing else it reads moves): with
        # many jobs stopping (a preemption wave), every waiting job would scan every stopping node again.
        key = (id(group), id(req))
        stamp = (self.claims, group.version)
        if self._no_claim.get(key) == stamp:
            return False
        if not self._claim(job, req, group):
            self._no_claim[key] = stamp
            return False
        return True

    def _claim(self, job: JobInfo, req: Request, group: Group) -> bool:
        """``_claim_stopping`` itself."""
        parts = part_sizes(req, group)
        if not parts:
            return False
        want = req.fraction if req.fraction is not None else 1.0
        devices = self.cluster.devices
        chosen: list[tuple[str, list[int]]] = []
        used: set[str] = set()
        n_parts = len(parts)
        unfilled = []
        count = group.count if want == 1.0 else None  # whole free devices per node order
        if count is not None and min(parts) > self._stopping_most(group):  # no part fits one
            return False
        for need in parts:
            # The nodes that may still give a part of this size (see _claimable); those found out for good
            # on the way leave the list.
            candidates = self._claimable(group, need if count is not None else 0)
            gone: set[str] = set()
            found = False
            for name, node, ids in candidates:
                if name in used:
                    continue
                stopping = self.stopping.get(name, _NO_SHARES)
                live = sum(1 for i in ids if i in stopping) if stopping else 0
                # At most its free devices and its released ones of the model qualify; both only ever shrink.
                if not live or (count is not None and count.get(node.order, 0) + live < need):
                    gone.add(name)
                    continue
                if not fits_host(node, req, n_parts):
                    continue
                ok = [d.id for d in node.by_model.get(group.model, ())
                      if d.healthy and d.memory_mb >= req.min_memory_mb
                      and d.free + stopping.get(d.id, 0.0) >= want - EPS][:need]
                if len(ok) == need and any(i in stopping for i in ok):
                    chosen.append((name, ok))
                    used.add(name)
                    found = True
                    break
            if gone:
                candidates[:] = [c for c in candidates if c[0] not in gone]
            if not found:
                unfilled.append(need)
        if not chosen:
            return False
        for need in unfilled:
            taken = [self.cluster.nodes[name].order for name in used]
            best = best_node(self.cluster, group, req, need, n_parts, False, None, exclude=taken)
            if best is None:
                return False
            node = best[0]
            chosen.append((node.name, [d.id for d in best[1]]))
            used.add(node.name)
        self.claims += 1
        idle: list[Placement] = []
        for name, ok in chosen:
            stopping = self.stopping.get(name, {})
            idle.extend(Placement(i, want) for i in ok if i not in stopping and devices[i].free >= want - EPS)
            for i in ok:
                stopping.pop(i, None)
            if name in self.stopping and not stopping:
                del self.stopping[name]
        if idle:
            self.cluster.take(job, tuple(idle))
        self.quota.charge(job.team, group.model, group.pool, req.amount)
        self.preempting_eta[job.id] = self.now
        names = ", ".join(name for name, _ok in chosen)
        self.wait(job, R.reason(
            R.PREEMPTING, f"waits for stopping jobs to release {shape_text(req)} of {group.model} on {names}",
            node=chosen[0][0], nodes=[name for name, _ok in chosen], gpu_model=group.model), group, req)
        return True

    def _claimable(self, group: Group, need: int) -> list[tuple[str, Node, tuple[int, ...]]]:
        """The group's schedulable nodes with devices of its model being released, in name order, each with
        those devices, that may still give a part of ``need`` whole devices (0: a fraction of one). Built
        once per cycle, group and size, from the snapshot's stopping jobs; ``_claim`` drops the nodes it finds
        out for good (free devices only get taken and released ones claimed during a cycle)."""
        key = (id(group), need)
        out = self._stopping_nodes.get(key)
        if out is None:
            base = self._stopping_nodes.get((id(group), None))
            if base is None:
                nodes, devices, model = self.cluster.nodes, self.cluster.devices, group.model
                base = self._stopping_nodes[(id(group), None)] = []
                for name in sorted(self.stopping):
                    node = nodes[name]
                    ids = tuple(i for i in self.stopping[name] if devices[i].model == model)
                    if ids and node.pool == group.pool and node.schedulable:
                        base.append((name, node, ids))
            out = self._stopping_nodes[key] = list(base)
        return out

    def _stopping_most(self, group: Group) -> int:
        """The most whole devices a claim could find on one node of the group at the start of the cycle (so
        at most that for the rest of it)."""
        most = self._stopping_max.get(id(group))
        if most is None:
            count = group.count
            most = self._stopping_max[id(group)] = max(
                (count.get(node.order, 0) + len(ids) for _name, node, ids in self._claimable(group, 0)), default=0)
        return most

    def _prepare_victims(self) -> None:
        """Sort possible victims once per cycle: per model for reclaim and per (team, model) (or per
        model, with cluster scope) for priority preemption, each in victim preference order (ineligible
        jobs left out). A team's list is its part of the model's list with the team's "borrowed" flag,
        which is one value per list, so the order carries over."""
        quota, now, classes, taken = self.quota, self.now, self.classes, self.victims
        cluster_scope = self.policy.preemption_scope == "cluster"
        self.pref_team: dict[tuple[str | None, str], list] = {}
        self.pref_model: dict[str, list] = {}
        self.pref_start: dict[str, int] = defaultdict(int)
        self.team_key: dict[int, tuple] = {}  # job id -> its key in its priority list
        self.model_key: dict[int, tuple] = {}  # job id -> its key in its model's (reclaim) list
        self.on_node: dict[str, list[Running]] | None = None  # built on first use (see _extra_candidates)
        self.biggest: dict[str, list[Running]] = {}  # likewise, per model
        # Per (model, pool): how many possible reclaim victims each team still has (victims leave it).
        self.lenders: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.lender_ids: set[int] = set()
        team_key, model_key, lenders, lender_ids = self.team_key, self.model_key, self.lenders, self.lender_ids
        interval = self.cycle_interval_s
        for model, recs in self.running_by_model.items():
            ok = []
            for r in recs:
                if eligible(r, classes, now, taken):
                    ok.append((victim_order(r, True, now), r))
            ok.sort(key=_first)
            self.pref_model[model] = ok
            by_team: dict[str | None, list] = defaultdict(list)
            for k, r in ok:
                jid = r.job.id
                at = reclaimable_at(r.job, classes, interval)
                if at is None or at <= now + EPS:  # a possible reclaim victim
                    model_key[jid] = k
                    lenders[(model, r.pool)][r.job.team] += 1
                    lender_ids.add(jid)
                by_team[None if cluster_scope else r.job.team].append((k, r))
            for team, items in by_team.items():
                if team is None:  # cluster scope: each job with its own team's flag, in ascending
                    # priority (the early stops in _candidates rely on it), borrowed first within one
                    items = sorted(((self._flagged(k, r.job.team, model), r) for k, r in items),
                                   key=lambda kr: (kr[0][1], kr[0]))
                elif quota.borrowed(team, model) <= EPS:  # the model's keys say "borrowed" (0)
                    items = [((1,) + k[1:], r) for k, r in items]
                self.pref_team[(team, model)] = items
                for k, r in items:
                    team_key[r.job.id] = k

    def _reclaim_wait(self, job: JobInfo, req: Request, group: Group) -> Reason | None:
        """For a job inside its team's guarantee that nothing could be planned for: if borrowers' jobs in
        the group are only protected by their minimum runtime, say when the first becomes reclaimable."""
        quota = self.quota
        model = group.model
        if not quota.within_guarantee(job.team, model, req.amount):
            return None
        used = quota.team_used(job.team, model)
        guaranteed = quota.guaranteed.get((job.team, model), 0.0)
        taken = self.victims
        for (at, _jid), rec in self._young_in(model, group.pool):
            team = rec.job.team
            if team != job.team and rec.job.id not in taken and quota.lendable(team, model) > EPS:
                return R.reason(
                    R.WAITING_FOR_RECLAIM,
                    f"team {job.team} holds {R.fmt_gpus(used)} of its {R.fmt_gpus(guaranteed)} guaranteed {model}; "
                    f"borrowed GPUs in pool {group.pool} can be reclaimed in {R.fmt_duration(at - self.now)}, "
                    f"when team {team}'s job {rec.job.id} has run its minimum time",
                    gpu_model=model, pool=group.pool, reclaimable_at=at, borrower=team, in_use=R.num(used),
                    guaranteed=R.num(guaranteed))
        return None

    def _young_in(self, model: str, pool: str) -> list:
        """Running preemptible jobs of the model in the pool not yet reclaimable (minimum runtime, hysteresis),
        by when they become so (built once per cycle and group)."""
        out = self._young.get((model, pool))
        if out is not None:
            return out
        out = []
        for rec in self.running_by_model.get(model, ()):
            job = rec.job
            if rec.pool != pool or not job.preemptible or job.terminating:
                continue
            at = reclaimable_at(job, self.classes, self.cycle_interval_s)
            if at is not None and at > self.now + EPS:
                out.append(((at, job.id), rec))
        out.sort(key=_first)
        self._young[(model, pool)] = out
        return out

    def _flagged(self, key: tuple, team: str, model: str) -> tuple:
        """A model-list key (flagged "borrowed") with the team's real flag."""
        return key if self.quota.borrowed(team, model) > EPS else (1,) + key[1:]

    def _has_candidates(self, job: JobInfo, group: Group, reclaim: bool) -> bool:
        """Whether ``_candidates`` would yield anything (most waiting jobs have no victim at all: answer
        that without walking every running job of the model)."""
        taken = self.victims
        pool = group.pool
        for _key, rec in self.pref_team.get((self._scope_of(job), group.model), ()):
            if rec.job.priority >= job.priority:
                break
            if rec.pool == pool and rec.job.id not in taken:
                return True
        if not reclaim:
            return False
        model = group.model
        lendable = self.quota.lendable
        for team, count in self.lenders[(model, pool)].items():
            if count and team != job.team and lendable(team, model) > EPS:
                return True
        return False

    def _candidates(self, job: JobInfo, group: Group, reclaim: bool, room: dict[str, float],
                    limit: int = PLAN_LIMIT) -> list[tuple[tuple, Running, str]]:
        """The first ``limit`` victim candidates for ``job`` in ``group``, best first (both rules merged).

        Fills ``room`` with what reclaim may take from each other team (nothing changes while a plan is
        made, so it is known up front)."""
        taken = self.victims
        pool = group.pool
        out: list[tuple[tuple, Running, str]] = []
        # One team's list has one "borrowed" flag, so it is in ascending priority: stop at the first job
        # that is not of lower priority.
        for key, rec in self.pref_team.get((self._scope_of(job), group.model), ()):
            if rec.job.priority >= job.priority or len(out) >= limit:
                break
            if rec.pool == pool and rec.job.id not in taken:
                out.append((key, rec, PRIORITY))
        if not reclaim:
            near = self._extra_candidates(job, group, False, set(), {c[1].job.id for c in out})
            return sorted(out + near, key=_first) if near else out
        for team in self.lenders[(group.model, pool)]:
            if team != job.team:
                room[team] = self.quota.lendable(team, group.model)
        lenders = {team for team, left in room.items() if left > EPS}
        order = self.pref_model.get(group.model, ())
        start = self.pref_start[group.model]
        while start < len(order) and order[start][1].job.id in taken:
            start += 1
        self.pref_start[group.model] = start
        reclaim_out = []
        # With cluster scope a lower-priority job of a lender may already be a priority candidate.
        as_priority = {c[1].job.id for c in out} if out else ()
        if lenders:
            for i in range(start, len(order)):
                key, rec = order[i]
                if (rec.job.team in lenders and rec.pool == pool and rec.job.id not in taken
                        and rec.job.id not in as_priority and rec.job.id in self.model_key):
                    reclaim_out.append((key, rec, RECLAIM))
                    if len(reclaim_out) >= limit:
                        break
        # Keys are unique (they end with the job id), so sorting merges the two ordered lists.
        merged = sorted(out + reclaim_out, key=_first)[:limit] if out else reclaim_out
        near = self._extra_candidates(job, group, reclaim, lenders, {c[1].job.id for c in merged})
        return sorted(merged + near, key=_first) if near else merged

    def _extra_candidates(self, job: JobInfo, group: Group, reclaim: bool, lenders: set[str],
                          seen: set[int]) -> list[tuple[tuple, Running, str]]:
        """Victim candidates beyond the first ``PLAN_LIMIT`` by preference, where the smallest victim set
        often is: on the group's nodes with the most free devices (a nearly free node whose one job is
        old, so preferred last), and the jobs holding the most devices (one victim can free a whole
        node). Without them a team under its guarantee could wait for hours behind a spread of recent
        small jobs it cannot combine into a node."""
        out: list[tuple[tuple, Running, str]] = []
        scope = self._scope_of(job)
        taken = self.victims
        team_key, model_key = self.team_key, self.model_key
        pool = group.pool

        def consider(rec: Running) -> None:
            jid = rec.job.id
            if jid in seen or jid in taken or rec.pool != pool:
                return
            team = rec.job.team
            if (scope is None or team == scope) and rec.job.priority < job.priority and jid in team_key:
                out.append((team_key[jid], rec, PRIORITY))
                seen.add(jid)
            elif reclaim and team in lenders and team != job.team and jid in model_key:
                out.append((model_key[jid], rec, RECLAIM))
                seen.add(jid)

        on_node = self.on_node
        if on_node is None:
            on_node = self.on_node = defaultdict(list)
            for order in self.pref_model.values():
                for _k, rec in order:
                    for name in rec.nodes:
                        on_node[name].append(rec)
        buckets = group.buckets
        nodes = self.cluster.node_by_order
        looked = 0
        for k in range(len(buckets) - 1, 0, -1):
            for node_order in buckets[k]:
                if looked >= NEAR_NODES:
                    break
                looked += 1
                for rec in on_node.get(nodes[node_order].name, ()):
                    consider(rec)
        if req_devices(job) > 1:
            biggest = self.biggest.get(group.model)
            if biggest is None:
                ranked = sorted((kr for kr in self.pref_model.get(group.model, ()) if len(kr[1].shares) > 1),
                                key=lambda kr: (-len(kr[1].shares), kr[0]))
                biggest = self.biggest[group.model] = [r for _k, r in ranked]
            found = len(out)
            for n, rec in enumerate(biggest):
                if n >= 4 * BIG_JOBS or len(out) - found >= BIG_JOBS:
                    break
                consider(rec)
        return out

    def _plan(self, job: JobInfo, req: Request, group: Group) -> Plan | None:
        quota = self.quota
        model = group.model
        amount = req.amount
        if not hasattr(self, "pref_team"):
            self._prepare_victims()
        under_guarantee = quota.within_guarantee(job.team, model, amount)
        room: dict[str, float] = {}
        reclaim = self.reclaim_open and under_guarantee and self.policy.borrowing and self.policy.reclaim
        if not self._has_candidates(job, group, reclaim):
            return None
        cands = self._candidates(job, group, reclaim, room)
        plan = plan_on_nodes(self.cluster, group, req, cands, room, limit=len(cands))
        if plan is None:
            return None
        # Only the team's own victims give quota back to it (with cluster scope, others' do not).
        credit = sum(sum(r.shares.values()) for r, rule in plan.victims if rule != RECLAIM and r.job.team == job.team)
        if quota.check_limit(job.team, model, group.pool, amount, credit=credit) is not None:
            return None
        if not under_guarantee and quota.check_guarantee(
                job.team, model, amount, job.preemptible, self.policy.borrowing,
                self.free_of_model[model] + credit, self.nl_teams.get(model, []), credit=credit) is not None:
            return None
        return plan

    def _commit_plan(self, job: JobInfo, req: Request, group: Group, plan: Plan) -> None:
        grace = 0.0
        ids: list[int] = []
        own: list[int] = []  # victims of the waiting job's own team
        for rec, rule in plan.victims:
            victim = rec.job
            cls = self.classes.get(victim.priority_class)
            g = cls.grace_period_s if cls else 30.0
            grace = max(grace, g)
            since = victim.last_checkpoint_at if victim.last_checkpoint_at is not None else victim.started_at
            lost = max(self.now - since, 0.0) * sum(rec.shares.values()) if since is not None else 0.0
            if rule == RECLAIM:
                msg = (f"reclaim: team {job.team} takes back guaranteed {group.model} for job {job.id}; "
                       f"team {victim.team} borrows {R.fmt_gpus(self.quota.borrowed(victim.team, group.model))} "
                       "above its guarantee")
            elif self.policy.ordering == "las" and self.policy.las_thresholds_gpu_s:
                msg = (f"preempted by job {job.id} of team {job.team}, which has received less GPU time "
                       f"(least-attained-service rank {job.priority} > {victim.priority})")
            else:
                msg = (f"preempted by job {job.id} of team {job.team} (priority {job.priority} > "
                       f"{victim.priority})")
            self.preemptions.append(Preemption(victim.id, job.id, rule, msg, gpu_seconds_lost=lost,
                                               grace_period_s=g))
            self.victims.add(victim.id)
            if victim.id in self.lender_ids:
                self.lenders[(rec.model, rec.pool)][victim.team] -= 1
            self.quota.release(victim.team, group.model, sum(rec.shares.values()))
            ids.append(victim.id)
            if victim.team == job.team:
                own.append(victim.id)
        want = req.fraction if req.fraction is not None else 1.0
        idle = tuple(Placement(i, want) for i in plan.free_devices)
        if idle:
            self.cluster.take(job, idle)
        self.quota.charge(job.team, group.model, group.pool, req.amount)
        self.preempting_eta[job.id] = self.now + grace
        # The waiting job's team reads this reason: it names the team's own victims, and only counts
        # other teams' (their job ids are theirs to see).
        others = len(ids) - len(own)
        whose = "; ".join(filter(None, (
            f"your team's {', '.join(map(str, own))}" if own else "",
            f"{others} of other teams" if others else "")))
        self.wait(job, R.reason(
            R.PREEMPTING,
            f"preempting {len(ids)} job(s) ({whose}) to free {shape_text(req)} of "
            f"{group.model}; starts after their grace period ({grace:g} s)",
            victims=own, victims_of_other_teams=others, gpu_model=group.model, grace_period_s=grace), group, req)
