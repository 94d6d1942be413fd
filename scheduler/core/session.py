"""The session: one cycle's working copy of the snapshot (Volcano and KAI-Scheduler call it the same).

``Session(snapshot)`` builds, once per cycle, what every action reads: the cluster with running jobs'
devices taken (``Cluster``), quota usage (``QuotaBook``), the release timeline (``Timeline``), running
jobs indexed for preemption, devices of stopping jobs, and the ``Statement``, the only writer of tentative
state. It also answers the per-job look-ups the actions share: a job's placement ``Request``, the groups
that could ever hold it (``Feasibility``) and its ``Look`` (what it shares with every job that looks alike
to the walk). Nothing here outlives the cycle: look-ups are remembered in ``Memo``, which belongs to the
session and is dropped with it.
"""

from __future__ import annotations

from collections import defaultdict
from operator import attrgetter

from scheduler.core import reasons as R
from scheduler.core.cluster import Cluster, Group
from scheduler.core.feasibility import Feasibility, analyse
from scheduler.core.memo import Memo
from scheduler.core.placement import Request, request_of
from scheduler.core.preemption import index_running
from scheduler.core.quota import QuotaBook
from scheduler.core.statement import Statement
from scheduler.core.timeline import Timeline
from scheduler.core.types import JobInfo, Snapshot
from scheduler.core.victim_index import VictimIndex

_reason = R.reasoner("placement")  # reasons of the placement plugin


class Look:
    """What every waiting job that looks alike to the walk (see ``LOOK``) shares: its team, request,
    feasibility and the GPUs it charges, plus what the walk remembers for all of them: whether they would
    start inside the team's guarantee (until the next quota charge) and, per reservation vetoes, the last
    one's wait (see ``actions.admit.try_job``)."""

    __slots__ = ("accepted", "amount", "feas", "groups", "memo", "models", "reason", "req", "team", "vetoes_key",
                 "wants", "within", "within_at")

    def __init__(self, job: JobInfo, req: Request, feas: Feasibility, amount: float):
        self.team = job.team
        self.req = req
        self.feas = feas
        self.groups = feas.groups
        self.models = feas.models
        self.reason = feas.reason
        self.amount = amount
        self.within_at = -1
        self.within = True
        # What its reservation vetoes depend on besides the time limit: shared by every look with the
        # same groups, team and amount (looks that differ only in priority, class or kind)
        self.vetoes_key = (id(self.groups), self.team, amount)
        self.memo: dict[tuple, tuple] = {}  # reservation vetoes -> (state, wait record, searches)
        self.accepted = job.gpu_models  # empty: any of the team's models
        # GPUs each job asks for, as borrowing plans count them
        self.wants = job.gpu_fraction if job.gpu_fraction and job.gpu_fraction < 1 else float(job.gpus)


# What makes two waiting jobs look alike to the walk (with their node labels, when they have any): their
# profile (team, pool, models, request) and what orders and rules them (priority, class, preemptible,
# kind: inference spreads). Time limits enter through reservation vetoes.
LOOK = attrgetter("team", "pool", "gpu_models", "gpus", "gpu_fraction", "nodes", "gpu_memory_mb", "cpus",
                  "memory_mb", "min_driver_version", "priority", "priority_class", "preemptible", "kind",
                  "may_preempt", "image", "image_pools")


class Session:
    """The working state of one cycle: read by the actions and plugins, written only by ``statement``."""

    reuse_waits = True  # see actions.admit.try_job; tests turn it off to check reuse never changes a decision

    def __init__(self, snapshot: Snapshot):
        self.snapshot = snapshot
        self.now = snapshot.now
        self.policy = snapshot.policy
        self.cycle_interval_s = snapshot.cycle_interval_s
        if self.policy.preemption_scope not in ("team", "cluster"):
            raise ValueError(f"unknown preemption_scope {self.policy.preemption_scope!r}; allowed: cluster, team")
        self.classes = {c.name: c for c in snapshot.priority_classes}
        self.cluster = cluster = Cluster(snapshot)
        self.quota = QuotaBook(snapshot, cluster.held)
        self.pools = sorted({n.pool for n in snapshot.nodes})
        self.team_pools = {t.name: t.pools for t in snapshot.teams if t.pools is not None}
        self.models_in_cluster = tuple(sorted({m for (_p, m) in cluster.groups}))
        self.free_of_model: dict[str, float] = defaultdict(float)  # idle healthy capacity on schedulable nodes
        for (_pool, model), group in cluster.groups.items():
            self.free_of_model[model] += group.total_free() + sum(free for free, _gpu in group.partial)
        self.nl_teams: dict[str, list[str]] = defaultdict(list)  # per model: teams with a never-lent part
        for (team, model), nl in sorted(self.quota.non_lendable.items()):
            if nl > 0:
                self.nl_teams[model].append(team)
        self.timeline = Timeline(cluster, self.now, self.classes)
        self.running_by_team, self.running_by_model = index_running(cluster)
        # Devices of terminating jobs, per node: they free up once their processes are gone.
        self.stopping: dict[str, dict[int, float]] = defaultdict(dict)
        devices = cluster.devices
        for h in cluster.held:
            if h.job.terminating:
                for gpu_id, share in h.shares.items():
                    held = self.stopping[devices[gpu_id].node.name]
                    held[gpu_id] = held.get(gpu_id, 0.0) + share
                for (_pool, model), amount in h.amounts.items():
                    # Already on its way out: reclaim may not count it again as the team's borrowing,
                    # or a team would be pushed below its guarantee across cycles (reclaim ping-pong).
                    self.quota.release(h.job.team, model, amount)
        # Reclaim serves only guaranteed work the walk admits ahead of borrowing (see actions.reclaim).
        self.reclaim_open = True
        self.stats: dict[str, int] = defaultdict(int)
        self.memo = Memo()
        self.victim_index: VictimIndex | None = None  # actions.preempt builds it on first use (victims.VictimIndex)
        self.statement = Statement(self)

    # -- per-job look-ups ----------------------------------------------------------------------------

    def request(self, job: JobInfo) -> Request:
        """The job's placement request (one object per distinct request in the session)."""
        key = (job.gpus, job.gpu_fraction, job.nodes, job.gpu_memory_mb, job.cpus, job.memory_mb,
               tuple(job.node_labels.items()) if job.node_labels else (), job.min_driver_version)
        memo = self.memo
        req = memo.requests.get(key)
        if req is None:
            req = request_of(job)
            req = memo.requests[key] = memo.request_values.setdefault(req, req)
        return req

    def look_of(self, job: JobInfo) -> Look:
        """The job's ``Look``: shared by every job of the session that looks alike (see ``LOOK``)."""
        key = LOOK(job)
        if job.node_labels:
            key = (key, tuple(job.node_labels.items()))
        looks = self.memo.looks
        look = looks.get(key)
        if look is None:
            look = looks[key] = self._look(job)
        return look

    def _look(self, job: JobInfo) -> Look:
        req = self.request(job)
        if req.gpus <= 0:
            return Look(job, req, Feasibility((), _reason(R.UNSATISFIABLE, "the job requests no GPUs",
                                                           constraint="gpus", requested=job.gpus)), 0.0)
        return Look(job, req, self.feasibility(job, req), req.amount)

    def feasibility(self, job: JobInfo, req: Request) -> Feasibility:
        """Groups that could ever hold the job: pools its team may use (and its image is allowed in), the
        GPU models it accepts (any: the team's, else the cluster's whole GPUs, never a MIG slice)."""
        allowed = self.team_pools.get(job.team)
        memo = self.memo
        pools: tuple[str, ...] | None
        if job.pool is not None:
            if allowed is not None and job.pool not in allowed:
                return Feasibility((), _reason(
                    R.NO_MATCHING_POOL,
                    f"team {job.team} may not use pool {job.pool} (allowed: {', '.join(sorted(allowed))})",
                    team=job.team, pool=job.pool, allowed=sorted(allowed)))
            if job.pool not in self.pools:
                return Feasibility((), _reason(R.NO_MATCHING_POOL, f"no pool named {job.pool} has nodes",
                                                pool=job.pool))
            pools = (job.pool,)
        else:
            pools = memo.pools_of.get(job.team)
            if pools is None:
                pools = memo.pools_of[job.team] = tuple(p for p in self.pools if allowed is None or p in allowed)
            if not pools:
                return Feasibility((), _reason(
                    R.NO_MATCHING_POOL, f"team {job.team} may not use any pool that has nodes",
                    team=job.team, allowed=sorted(allowed or ())))
        if job.image_pools is not None:  # only pools whose allow-list admits the job's image
            admitting = tuple(p for p in pools if p in job.image_pools)
            if not admitting:
                return Feasibility((), _reason(
                    R.IMAGE_NOT_ALLOWED, f"image {job.image} is not allowed in pool(s) {', '.join(pools)}: a "
                    "platform admin sets the images each pool allows", image=job.image, pools=list(pools)))
            pools = admitting
        models: tuple[str, ...] | None = job.gpu_models
        if not models:
            models = memo.models_of.get(job.team)
            if models is None:
                slices = self.slice_models()
                models = tuple(m for m in sorted(self.quota.models_of_team.get(job.team, ())) if m not in slices)
                models = models or tuple(m for m in self.models_in_cluster if m not in slices)
                memo.models_of[job.team] = models
        key = (pools, models, id(req))
        hit = memo.feasible.get(key)
        if hit is None:
            hit = memo.feasible[key] = analyse(self.cluster, job, req, pools, models)
        return hit

    def slice_models(self) -> frozenset[str]:
        """The models whose devices are MIG slices (found once a session, when a job asks for any model)."""
        if self.memo.slices is None:
            self.memo.slices = frozenset(d.model for d in self.cluster.devices.values() if d.mig)
        return self.memo.slices

    def state(self, groups: tuple[Group, ...]) -> int:
        """A number that moves whenever anything a job's walk over ``groups`` reads changes: the groups'
        nodes, quota usage of their models, victims, reservations, strict-order blocks, claims."""
        st = self.statement
        versions = self.quota.version
        n = len(st.victims) + len(st.reservations) + len(st.blocked_by) + st.claims
        for group in groups:
            n += group.version + versions[group.model]
        return n
