"""One scheduling cycle: ``schedule(snapshot) -> Decisions``.

The shape follows Volcano/KAI: build a working copy of the cluster (``Cluster``) and of quota usage
(``QuotaBook``), walk the queue in policy order, and for each waiting job either start it, plan
preemptions for it, or record why it waits; then estimate starts for everything that waits. Everything is
deterministic: inputs are sorted, ties break on job id, node name and device index, and no clock is read
(time is ``snapshot.now``).
"""

from __future__ import annotations

import gc
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from operator import attrgetter

from scheduler.core import reasons as R
from scheduler.core.backfill import Reservation, Timeline
from scheduler.core.cluster import EPS, Cluster, Group, Node
from scheduler.core.estimates import pending_infos
from scheduler.core.feasibility import Feasibility, analyse, shape_text
from scheduler.core.loans import with_loans
from scheduler.core.ordering import ranked, sort_key
from scheduler.core.placement import Request, place, request_of
from scheduler.core.preemption import Preempting, index_running
from scheduler.core.quota import QuotaBook
from scheduler.core.types import (
    HELD,
    PENDING,
    Decisions,
    JobInfo,
    Placement,
    Reason,
    Snapshot,
    Start,
)

Timer = Callable[[str], None]


class Look:
    """What every waiting job that looks alike to the walk shares (see ``_LOOK``): its team, request,
    feasibility and the GPUs it charges, plus what the cycle remembers for all of them: whether they would
    start inside the team's guarantee (until the next quota charge) and, per reservation vetoes (see
    ``Cycle._vetoes``), the last one's wait (see
    ``Cycle.try_job``)."""

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


class Cycle(Preempting):
    """The working state of one cycle (a session, in Volcano's words)."""

    reuse_waits = True  # see try_job; tests turn it off to check that reuse never changes a decision

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
        self.free_of_model = defaultdict(float)  # idle healthy capacity on schedulable nodes
        for (_pool, model), group in cluster.groups.items():
            self.free_of_model[model] += group.total_free() + sum(free for free, _gpu in group.partial)
        self.nl_teams = defaultdict(list)
        for (team, model), nl in sorted(self.quota.non_lendable.items()):
            if nl > 0:
                self.nl_teams[model].append(team)
        self.timeline = Timeline(cluster, self.now, self.classes)
        self.running_by_team, self.running_by_model = index_running(cluster)
        # Devices of terminating jobs, per node: they free up once their processes are gone.
        self.stopping = defaultdict(dict)
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
        self.starts: list[Start] = []
        self.preemptions = []
        self.victims = set()
        self.reclaim_open = True  # see Preempting.reclaim_open
        self._young = {}  # see Preempting._young_in
        self.waiting: list[tuple[JobInfo, Reason, Group | None, Request | None]] = []
        self.preempting_eta = {}
        self.stats: dict[str, int] = defaultdict(int)
        self.reservations: dict[tuple[str, str], Reservation] = {}
        self.reserved_nodes: dict[int, Reservation] = {}
        self.blocked_by: dict[tuple[str, str], int] = {}  # strict order: group -> first blocked job
        self._feasible: dict[tuple, Feasibility] = {}
        self._pools_of: dict[str, tuple[str, ...]] = {}
        self._models_of: dict[str, tuple[str, ...]] = {}
        self._slices: frozenset[str] | None = None  # see slice_models
        self._quota_blocked: dict[tuple, Reason] = {}
        self._quota_ok: dict[tuple, int] = {}  # key -> quota.version of the model when it was admitted
        self.claims = 0  # devices of stopping jobs claimed so far
        self._full: set[tuple] = set()
        self._no_claim = {}  # see Preempting._claim_stopping
        self._stopping_nodes = {}  # see Preempting._claimable
        self._stopping_max = {}  # see Preempting._stopping_most
        self._no_plan = set()
        self._requests: dict[tuple, Request] = {}
        self._looks: dict[_Token, Look] = {}  # look-alike token -> its Look (see look_of)
        self._tokens: dict[int, tuple[JobInfo, _Token]] = {}  # id(job) -> (job, token), for the next cycle
        self._spread = self.policy.placement == "spread"
        self._request_values: dict[Request, Request] = {}
        # (id(group), id(req), spread, vetoed) -> (group.version, placements or None)
        self._placed: dict[tuple, tuple[int, tuple[Placement, ...] | None]] = {}
        self._waits: dict[tuple, tuple[int, Reason]] = {}  # (id(group), id(req)) -> (version, reason)
        self._priority_reasons: dict[tuple | int, Reason] = {}  # per group, while a job ahead holds it
        # (look.vetoes_key, time limit) -> reservation vetoes, while quota.charges and the number of
        # reservations are _vetoes_at and _vetoes_res (see _vetoes)
        self._vetoes_of: dict[tuple, tuple] = {}
        self._vetoes_at = self._vetoes_res = -1

    # -- static part -------------------------------------------------------------------------------

    def request(self, job: JobInfo) -> Request:
        """The job's placement request (shared between jobs of the same shape)."""
        key = (job.gpus, job.gpu_fraction, job.nodes, job.gpu_memory_mb, job.cpus, job.memory_mb,
               tuple(job.node_labels.items()) if job.node_labels else (), job.min_driver_version)
        req = self._requests.get(key)
        if req is None:
            req = request_of(job)
            # One object per distinct request, so caches can key on id(req) instead of hashing fields.
            req = self._requests[key] = self._request_values.setdefault(req, req)
        return req

    def within_guarantee(self, look: Look) -> bool:
        """Whether a job of ``look`` would start inside its team's guarantee of some model it accepts (jobs
        that only wait, being unsatisfiable, count as inside: their place in the walk changes nothing).
        Remembered until the next charge of quota."""
        charges = self.quota.charges
        if look.within_at != charges:
            within = self.quota.within_guarantee
            look.within = look.reason is not None or any(within(look.team, g.model, look.amount)
                                                           for g in look.groups)
            look.within_at = charges
        return look.within

    def look_of(self, job: JobInfo) -> Look:
        """The job's ``Look``: what it shares with every job that looks alike to the walk (see ``_LOOK``).

        Looks are found by a token per look-alike key, and the token of a job object is remembered for
        the next cycle (the simulator, and a steady backlog, hand the same waiting jobs in again): the
        key's fourteen fields are then neither read nor hashed again."""
        jid = id(job)
        hit = _last_tokens.get(jid)
        if hit is None or hit[0] is not job:
            key = _LOOK(job)
            if job.node_labels:
                key = (key, tuple(job.node_labels.items()))
            token = _TOKENS.get(key)
            if token is None:
                if len(_TOKENS) >= _MAX_TOKENS:  # a new registry; jobs holding old tokens still work (their
                    _TOKENS.clear()  # look-alikes may then get two looks, which only costs a walk)
                token = _TOKENS.setdefault(key, _Token())
            hit = (job, token)
        self._tokens[jid] = hit
        look = self._looks.get(hit[1])
        if look is None:
            look = self._looks[hit[1]] = self._look(job)
        return look

    def _look(self, job: JobInfo) -> Look:
        """A new ``Look`` for ``job``: its request, feasibility and the GPUs it charges."""
        req = self.request(job)
        if req.gpus <= 0:
            return Look(job, req, Feasibility((), R.reason(R.UNSATISFIABLE, "the job requests no GPUs",
                                                           constraint="gpus", requested=job.gpus)), 0.0)
        return Look(job, req, self.feasibility(job, req), req.amount)

    def feasibility(self, job: JobInfo, req: Request) -> Feasibility:
        """Groups that could ever hold the job (cached per pools/models/request shape)."""
        allowed = self.team_pools.get(job.team)
        pools: tuple[str, ...] | None
        if job.pool is not None:
            if allowed is not None and job.pool not in allowed:
                return Feasibility((), R.reason(
                    R.NO_MATCHING_POOL,
                    f"team {job.team} may not use pool {job.pool} (allowed: {', '.join(sorted(allowed))})",
                    team=job.team, pool=job.pool, allowed=sorted(allowed)))
            if job.pool not in self.pools:
                return Feasibility((), R.reason(R.NO_MATCHING_POOL, f"no pool named {job.pool} has nodes",
                                                pool=job.pool))
            pools = (job.pool,)
        else:
            pools = self._pools_of.get(job.team)
            if pools is None:
                pools = self._pools_of[job.team] = tuple(p for p in self.pools if allowed is None or p in allowed)
            if not pools:
                return Feasibility((), R.reason(
                    R.NO_MATCHING_POOL, f"team {job.team} may not use any pool that has nodes",
                    team=job.team, allowed=sorted(allowed or ())))
        if job.image_pools is not None:  # only pools whose allow-list admits the job's image
            admitting = tuple(p for p in pools if p in job.image_pools)
            if not admitting:
                return Feasibility((), R.reason(
                    R.IMAGE_NOT_ALLOWED, f"image {job.image} is not allowed in pool(s) {', '.join(pools)}: a "
                    "platform admin sets the images each pool allows", image=job.image, pools=list(pools)))
            pools = admitting
        models: tuple[str, ...] | None = job.gpu_models
        if not models:  # any model: the team's (else the cluster's) whole GPUs, never a MIG slice
            models = self._models_of.get(job.team)
            if models is None:
                slices = self.slice_models()
                models = tuple(m for m in sorted(self.quota.models_of_team.get(job.team, ())) if m not in slices)
                models = models or tuple(m for m in self.models_in_cluster if m not in slices)
                self._models_of[job.team] = models
        key = (pools, models, id(req))
        hit = self._feasible.get(key)
        if hit is None:
            hit = self._feasible[key] = analyse(self.cluster, job, req, pools, models)
        return hit

    def slice_models(self) -> frozenset[str]:
        """The models whose devices are MIG slices (found once a cycle, when a job asks for any model)."""
        if self._slices is None:
            self._slices = frozenset(d.model for d in self.cluster.devices.values() if d.mig)
        return self._slices

    def plan_borrowing(self, looks: Iterable[Look]) -> None:
        """Find, per model, the teams that borrow or would borrow, and split borrowable capacity by weight
        (``looks``: those of the waiting jobs, each once)."""
        if not self.policy.borrowing:
            return
        quota = self.quota
        borrowers: dict[str, set[str]] = defaultdict(set)
        for (team, model, pool), used in list(quota.used.items()):
            if pool is None and used > quota.guaranteed.get((team, model), 0.0) + EPS and (team, model) in quota.weight:
                borrowers[model].add(team)
        # A team would borrow a model when its largest waiting request of it passes its guarantee.
        largest: dict[tuple, float] = {}  # (team, accepted models) -> largest amount
        for look in looks:
            key = (look.team, look.accepted)
            if look.wants > largest.get(key, -math.inf):
                largest[key] = look.wants
        for (team, accepted), amount in largest.items():
            for model in accepted or tuple(quota.models_of_team.get(team, ())):
                cell = (team, model)
                if (cell in quota.weight
                        and quota.team_used(team, model) + amount > quota.guaranteed.get(cell, 0.0) + EPS):
                    borrowers[model].add(team)
        quota.plan_borrowing(dict(self.free_of_model), borrowers)

    # -- per job -----------------------------------------------------------------------------------

    def wait(self, job: JobInfo, reason: Reason, group: Group | None = None, req: Request | None = None) -> None:
        """Record that ``job`` waits this cycle (the estimate is filled in after the walk)."""
        self.waiting.append((job, reason, group, req))

    def quota_check(self, job: JobInfo, group: Group, amount: float) -> Reason | None:
        """Limits, guarantee rules and borrowing for ``job`` in ``group`` (cached: a refusal is kept, as
        usage only grows; an admission holds until the next charge of the model)."""
        key = (job.team, group.model, group.pool, amount, job.preemptible)
        blocked = self._quota_blocked.get(key)
        if blocked is not None:
            return blocked
        version = self.quota.version[group.model]
        if self._quota_ok.get(key) == version:
            return None
        blocked = self.quota.check_limit(job.team, group.model, group.pool, amount)
        if blocked is None:
            blocked = self.quota.check_guarantee(
                job.team, group.model, amount, job.preemptible, self.policy.borrowing,
                self.free_of_model[group.model], self.nl_teams.get(group.model, []))
        if blocked is not None:
            self._quota_blocked[key] = blocked
        else:
            self._quota_ok[key] = version
        return blocked

    def try_job(self, job: JobInfo, look: Look | None = None) -> tuple | None:
        """Start ``job``, plan preemptions for it, or record why it waits (``look``: its ``look_of``, when
        the caller has it). Returns, when the job waits and nothing changed, what each look-alike with the
        same time limit that comes right after it gets (see ``follow``): (wait record, searches)."""
        if job.state == HELD:
            self.waiting.append((job, _HELD_REASON, None, None))
            return None
        if look is None:
            look = self.look_of(job)
        if look.reason is not None:
            rec = (look.reason, None, None)
            self.waiting.append((job,) + rec)
            return rec, 0
        end = self.now + job.time_limit_s if job.time_limit_s is not None else None
        # Jobs that look the same to the walk (same Look and reservation vetoes) while nothing they read
        # has changed end the same way: reuse the last one's wait.
        groups = look.groups
        vetoes: tuple = ()
        if self.reservations:
            if self._vetoes_at != self.quota.charges or self._vetoes_res != len(self.reservations):
                self._vetoes_of.clear()
                self._vetoes_at, self._vetoes_res = self.quota.charges, len(self.reservations)
            known = self._vetoes_of.get((look.vetoes_key, job.time_limit_s))
            vetoes = self._vetoes(job, look, end) if known is None else known
        state = self._state(groups)
        memo = look.memo.get(vetoes) if self.reuse_waits else None
        if memo is not None and memo[0] == state:
            self.waiting.append((job,) + memo[1])
            if memo[2]:
                self.stats["placement_searches"] += memo[2]
            return memo[1], memo[2]
        stats = self.stats
        searches, full, waits, starts = stats.get("placement_searches", 0), len(self._full), len(self.waiting), len(
            self.starts)
        self._walk(job, look.req, look.feas, look.amount, self._spread or job.kind == "inference", end)
        if (self.reuse_waits and len(self.waiting) == waits + 1 and len(self.starts) == starts
                and self._state(groups) == state):
            # The next look-alike skips the groups this walk found full, so it searches that many fewer.
            searches = stats.get("placement_searches", 0) - searches - (len(self._full) - full)
            memo = look.memo[vetoes] = (state, self.waiting[-1][1:], searches)
            return memo[1], memo[2]
        return None

    def follow(self, pairs: list[tuple[JobInfo, Look | None]], i: int, look: Look, time_limit: float | None,
               got: tuple) -> int:
        """After a job of ``look`` waited with nothing changed (``got``: what ``try_job`` returned), give
        the look-alikes that follow it from ``pairs[i]`` on the same wait, as ``try_job`` would one by one
        (same look, state and, when reservations exist, time limit: the same vetoes); return where the
        next different job is. A backlog is mostly runs of such jobs (a team's jobs of one shape)."""
        rec, searches = got
        append = self.waiting.append
        any_limit = not self.reservations
        n, j = len(pairs), i
        while j < n:
            job, other = pairs[j]
            if other is not look or not (any_limit or job.time_limit_s == time_limit):
                break
            append((job,) + rec)
            j += 1
        if searches and j > i:
            self.stats["placement_searches"] += searches * (j - i)
        return j

    def try_in_order(self, pairs: list[tuple[JobInfo, Look | None]]) -> None:
        """``try_job`` for each (job, look) of ``pairs`` in order, runs of waiting look-alikes in one step."""
        i, n = 0, len(pairs)
        while i < n:
            job, look = pairs[i]
            i += 1
            got = self.try_job(job, look)
            if got is not None:  # it waits, so it has a look (held jobs have none and return None)
                i = self.follow(pairs, i, look or self.look_of(job), job.time_limit_s, got)

    def _vetoes(self, job: JobInfo, look: Look, end: float | None) -> tuple:
        """Per group of ``look``, whether its reservation keeps ``job`` off (``_vetoed``); empty when no
        group has one. Remembered per ``look.vetoes_key`` and time limit until a reservation is added or
        quota moves (what vetoes read: reservations, and whether work is inside its team's guarantee)."""
        reservations = self.reservations
        vetoes: tuple = ()
        if any((g.pool, g.model) in reservations for g in look.groups):
            vetoes = tuple(self._vetoed(job, g, reservations.get((g.pool, g.model)), end, look.amount)
                           for g in look.groups)
        self._vetoes_of[(look.vetoes_key, job.time_limit_s)] = vetoes
        return vetoes

    def _state(self, groups: tuple[Group, ...]) -> int:
        """A number that moves whenever anything a job's walk over ``groups`` reads changes: the groups'
        nodes, quota usage of their models, victims, reservations, strict-order blocks, claims."""
        versions = self.quota.version
        n = len(self.victims) + len(self.reservations) + len(self.blocked_by) + self.claims
        for group in groups:
            n += group.version + versions[group.model]
        return n

    def _walk(self, job: JobInfo, req: Request, feas: Feasibility, amount: float, spread: bool,
              end: float | None) -> None:
        """Try the job's groups in order: start it, plan preemptions for it, or record why it waits."""
        refusals: list[Reason] = []  # the quota's, one per group it refused
        first_ok: Group | None = None
        reserved_reason: Reason | None = None
        allowed: list[Group] = []  # groups the quota admits the job to (nothing changes until a start)
        for group in feas.groups:
            blocked = self.quota_check(job, group, amount)
            if blocked is not None:
                refusals.append(blocked)
                continue
            allowed.append(group)
            if first_ok is None:
                first_ok = group
            gkey = (group.pool, group.model)
            if not self.policy.backfill and gkey in self.blocked_by:
                reserved_reason = reserved_reason or self._behind_reason(group, gkey)
                continue
            fkey = (id(group), id(req))
            if fkey in self._full:
                continue
            self.stats["placement_searches"] += 1
            res = self.reservations.get(gkey)
            vetoed = self._vetoed(job, group, res, end, amount)
            placements = self._place(group, req, spread, vetoed)
            if placements is None and vetoed and res is not None:  # vetoed: by a reservation
                if self._place(group, req, spread, False) is not None:
                    reserved_reason = reserved_reason or self._reserved_reason(group, res)
                    continue
            if placements is None:
                self._full.add(fkey)
                continue
            self._start(job, group, placements, amount, end)
            return
        if self.policy.preemption and self._may_preempt(job) and self._try_preempt(job, req, feas.groups, allowed):
            return
        if first_ok is None:
            self.wait(job, _refused_everywhere(refusals))
            return
        if reserved_reason is not None:
            self.wait(job, reserved_reason, first_ok, req)
            return
        self._block(job, req, first_ok)

    def _vetoed(self, job: JobInfo, group: Group, res: Reservation | None, end: float | None,
                amount: float) -> bool:
        """Whether the group's reservation (if any) keeps ``job`` off its reserved devices: the job would
        run past the reserved start, and it is not work inside its team's guarantee facing a borrower's
        reservation (a borrower never keeps an owner from its guaranteed capacity)."""
        if res is None or (end is not None and end <= res.start + EPS):
            return False
        return not (res.borrowing and self.quota.within_guarantee(job.team, group.model, amount))

    def _place(self, group: Group, req: Request, spread: bool, vetoed: bool) -> tuple[Placement, ...] | None:
        """``placement.place`` (with the reservation veto when ``vetoed``), remembered until the group changes."""
        key = (id(group), id(req), spread, vetoed)
        hit = self._placed.get(key)
        if hit is not None and hit[0] == group.version:
            return hit[1]
        placements = place(self.cluster, group, req, spread, self._veto if vetoed else None)
        self._placed[key] = (group.version, placements)
        return placements

    def _behind_reason(self, group: Group, gkey: tuple[str, str]) -> Reason:
        """Strict order: the group's first blocked job holds it for everyone behind."""
        reason = self._priority_reasons.get(gkey)
        if reason is None:
            first = self.blocked_by[gkey]
            reason = self._priority_reasons[gkey] = R.reason(
                R.PRIORITY, f"waits behind job {first} for {group.model} in pool {group.pool} "
                "(strict queue order, no backfill)", blocked_by=first, gpu_model=group.model)
        return reason

    def _reserved_reason(self, group: Group, res: Reservation) -> Reason:
        """Backfill: the free devices are reserved for the group's first blocked job."""
        reason = self._priority_reasons.get(id(res))
        if reason is None:
            reason = self._priority_reasons[id(res)] = R.reason(
                R.PRIORITY,
                f"free {group.model} GPUs in pool {group.pool} are reserved for job {res.job_id}, "
                f"which starts in {R.fmt_duration(res.start - self.now)}; this job would run past that",
                reserved_for=res.job_id, reserved_start=res.start, gpu_model=group.model)
        return reason

    def _start(self, job: JobInfo, group: Group, placements: tuple[Placement, ...], amount: float,
               end: float | None) -> None:
        quota = self.quota
        before = quota.borrowed(job.team, group.model)
        self.cluster.take(job, placements)
        quota.charge(job.team, group.model, group.pool, amount)
        if not job.preemptible:
            quota.non_preemptible[(job.team, group.model)] += amount
        self.free_of_model[group.model] -= amount
        borrowed = quota.borrowed(job.team, group.model) - before
        self.starts.append(Start(job.id, placements, borrowed=R.num(max(borrowed, 0.0))))
        self._charge_reservations(placements, end)

    def _veto(self, node: Node, taken: float) -> bool:
        """Reservation rule for jobs that would run past the reserved start."""
        res = self.reserved_nodes.get(node.order)
        return res is not None and max(taken, 1.0) > res.slack.get(node.order, 0.0) + EPS

    def _charge_reservations(self, placements: tuple[Placement, ...], end: float | None) -> None:
        """A started job that outlives a reservation eats into the slack of the reserved nodes it uses."""
        if not self.reserved_nodes:
            return
        per_node: dict[int, float] = defaultdict(float)
        for p in placements:
            per_node[self.cluster.devices[p.gpu_id].node.order] += 1.0
        for order, count in per_node.items():
            res = self.reserved_nodes.get(order)
            if res is not None and (end is None or end > res.start + EPS):
                res.slack[order] = res.slack.get(order, 0.0) - count

    def _block(self, job: JobInfo, req: Request, group: Group) -> None:
        """The job waits for resources: reserve for it (first blocked job of the group), say why."""
        gkey = (group.pool, group.model)
        if not self.policy.backfill:
            self.blocked_by.setdefault(gkey, job.id)
        elif gkey not in self.reservations:
            res = self.timeline.reserve(group, req, job.id)
            if res is not None:
                res.borrowing = not self.quota.within_guarantee(job.team, group.model, req.amount)
                self.reservations[gkey] = res
                for order in res.slack:
                    self.reserved_nodes.setdefault(order, res)
                    self.cluster.touch(self.cluster.node_by_order[order])
        if self.reclaim_open and self.policy.reclaim and self.policy.borrowing and self.policy.preemption \
                and self._may_preempt(job):
            waiting = self._reclaim_wait(job, req, group)
            if waiting is not None:
                self.wait(job, waiting)
                return
        key = (id(group), id(req))
        hit = self._waits.get(key)
        if hit is None or hit[0] != group.version:
            hit = self._waits[key] = (group.version, self._wait_reason(req, group))
        self.wait(job, hit[1], group, req)

    def _wait_reason(self, req: Request, group: Group) -> Reason:
        """Why a job that fits nowhere waits: an incomplete gang, or not enough free devices."""
        if req.nodes and req.nodes > 1:
            ready = sum(len(b) for k, b in enumerate(group.buckets) if k >= req.gpus // req.nodes)
            if ready:
                return R.reason(
                    R.GANG_INCOMPLETE,
                    f"gang of {shape_text(req)} of {group.model}: only {ready} of {req.nodes} nodes have "
                    f"{req.gpus // req.nodes} free GPUs in pool {group.pool}",
                    gpu_model=group.model, pool=group.pool, nodes_ready=ready, nodes=req.nodes)
        if req.fraction is not None:  # what counts is the largest free share of one device
            largest = 1.0 if group.max_free() else max((free for free, _gpu in group.partial), default=0.0)
            return R.reason(
                R.RESOURCES,
                f"needs {shape_text(req)} of {group.model} in pool {group.pool}; the largest free share of a "
                f"device is {R.fmt_gpus(largest)}",
                gpu_model=group.model, pool=group.pool, requested=R.num(req.amount),
                largest_free_share=R.num(largest))
        most = group.max_free()
        total = group.total_free()
        return R.reason(
            R.RESOURCES,
            f"needs {shape_text(req)} of {group.model} in pool {group.pool}; "
            f"the freest node has {most} free ({total} free in the pool)",
            gpu_model=group.model, pool=group.pool, requested=R.num(req.amount), most_free_on_a_node=most,
            free_in_pool=total,
        )


# What makes two waiting jobs look alike to the walk (with their node labels, when they have any): their
# profile (team, pool, models, request) and what orders and rules them (priority, class, preemptible,
# kind: inference spreads). One C-level call builds the key; time limits enter through reservation vetoes.
_LOOK = attrgetter("team", "pool", "gpu_models", "gpus", "gpu_fraction", "nodes", "gpu_memory_mb", "cpus",
                   "memory_mb", "min_driver_version", "priority", "priority_class", "preemptible", "kind",
                   "may_preempt", "image", "image_pools")


class _Token:
    """Stands for one look-alike key (hashed by identity: cheaper than hashing the key's fields)."""

    __slots__ = ()


_TOKENS: dict[tuple, _Token] = {}  # look-alike key -> its token, shared by every cycle
_MAX_TOKENS = 200_000
# The last cycle's job tokens by id() of the job object. Entries keep their jobs alive, so an id found
# here is never a new object's; each cycle publishes a new dict and never changes a published one.
_last_tokens: dict[int, tuple[JobInfo, _Token]] = {}

_HELD_REASON = R.reason(R.HELD, "held: the scheduler skips this job until it is released")


def _refused_everywhere(refusals: list[Reason]) -> Reason:
    """One reason for a job the quota refuses in every group it could use: the refusal itself when there is
    one (or all say the same), else the first one's code and numbers with a message (and ``per_model``
    detail) that names every distinct refusal, so a job that accepts any model hears of each model."""
    distinct = list({r.message: r for r in refusals}.values())
    if len(distinct) == 1:
        return distinct[0]
    first = distinct[0]
    parts = [f"{r.details.get('gpu_model', '?')}: {r.message}" for r in distinct]
    return R.reason(first.code, "the quota refuses every GPU model the job accepts. " + ". ".join(parts),
                    **first.details, per_model=[{"gpu_model": r.details.get("gpu_model"), "code": r.code,
                                                 "message": r.message} for r in distinct])


def schedule(snapshot: Snapshot, timer: Timer | None = None) -> Decisions:
    """Run one scheduling cycle over ``snapshot`` and return what to start, preempt and report.

    Deterministic: the same snapshot always gives the same decisions. ``timer``, when given, is called
    with a phase name as each phase ends (the core reads no clock; callers measure).
    """
    with _collector_paused():
        return _schedule(snapshot, timer)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the cycle, restoring its state after.

    A cycle allocates many short-lived objects (keys, reasons, placements) and creates no reference
    cycles; each automatic collection would still walk every object of the snapshot (and of the host
    process), which cost about half of a 10,000-job cycle. Reference counting frees everything as usual.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _schedule(snapshot: Snapshot, timer: Timer | None) -> Decisions:
    global _last_tokens
    snapshot = ranked(with_loans(snapshot))
    cycle = Cycle(snapshot)
    try:
        decisions = _run(cycle, snapshot, timer)
    finally:
        cycle.cluster.close()
    _last_tokens = cycle._tokens
    return decisions


def _run(cycle: Cycle, snapshot: Snapshot, timer: Timer | None) -> Decisions:
    if timer:
        timer("index")
    key = sort_key(snapshot)
    queue = sorted((j for j in snapshot.jobs if j.state == PENDING or j.state == HELD), key=key)
    look_of = cycle.look_of
    pairs = [(job, None if job.state == HELD else look_of(job)) for job in queue]
    cycle.plan_borrowing(look for look in dict.fromkeys(look for _job, look in pairs) if look is not None)
    if timer:
        timer("order")
    try_job, within, follow = cycle.try_job, cycle.within_guarantee, cycle.follow
    n, i = len(pairs), 0
    if snapshot.policy.guarantee_first:
        while i < n:  # one priority level at a time
            priority = pairs[i][0].priority
            # Like Kueue's non-borrowing-first: a team's head that would borrow waits for the second pass,
            # and so does the rest of that team that wants the same models (a team's own order is kept
            # per model: no small job jumps its big one; work on other models is not held back).
            deferred: list = []
            held_back: dict[str, set[str]] = {}  # team -> models its deferred jobs want
            while i < n and pairs[i][0].priority == priority:
                job, look = pairs[i]
                i += 1
                if look is None:  # held
                    try_job(job)
                    continue
                models = held_back.get(job.team)
                if (not models or models.isdisjoint(look.models)) and within(look):
                    got = try_job(job, look)
                    if got is not None:  # its look-alikes right behind it pass the same tests and wait alike
                        i = follow(pairs, i, look, job.time_limit_s, got)
                else:
                    held_back.setdefault(job.team, set()).update(look.models)
                    deferred.append((job, look))
                    while i < n and pairs[i][1] is look:  # its look-alikes right behind it: deferred too
                        deferred.append(pairs[i])
                        i += 1
            # Deferred work is walked behind other teams' borrowing: it may not reclaim, or what it takes
            # back would go to the borrowers walked before it, which it would reclaim from again next cycle.
            cycle.reclaim_open = False
            cycle.try_in_order(deferred)
            cycle.reclaim_open = True
    else:
        cycle.try_in_order(pairs)
    if timer:
        timer("place")
    pending = pending_infos(cycle)
    if timer:
        timer("estimate")
    stats = dict(cycle.stats)
    stats["started"] = len(cycle.starts)
    stats["pending"] = len(pending)
    stats["preempted"] = len(cycle.preemptions)
    stats["reservations"] = len(cycle.reservations)
    decisions = Decisions(starts=tuple(cycle.starts), preemptions=tuple(cycle.preemptions), pending=pending,
                          stats=dict(sorted(stats.items())))
    if timer:
        timer("report")
    return decisions
