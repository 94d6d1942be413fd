"""The statement: the only writer of a session's tentative state, with commit and discard.

Like Volcano's ``framework/statement.go``: an action does not change the cluster or the quota itself; it
asks the statement to ``start`` a job on devices, ``evict`` a victim, ``hold`` devices for a job that waits
for its victims, ``claim`` devices of stopping jobs, ``reserve`` a group for a blocked job (backfill) or
``block`` a group (strict order), and records why a job waits (``wait``). Each operation applies at once (the
next job sees it) and notes how to undo itself; ``commit`` makes what was done since the last commit final,
``discard`` undoes it in reverse order. What the cycle decided is read from here at the end: ``starts``,
``preemptions``, ``waiting`` (in walk order) and the estimates' inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from scheduler.core import reasons as R
from scheduler.core.cluster import EPS, Group
from scheduler.core.placement import Request
from scheduler.core.types import JobInfo, Placement, Preemption, Reason, Start

if TYPE_CHECKING:
    from scheduler.core.preemption import Running
    from scheduler.core.session import Session
    from scheduler.core.timeline import Reservation

Wait = tuple  # (job, reason, group or None, request or None)


class Statement:
    """Tentative operations of one session (see the module docstring)."""

    def __init__(self, session: Session):
        self.session = session
        self.starts: list[Start] = []
        self.preemptions: list[Preemption] = []
        self.victims: set[int] = set()  # ids of jobs being preempted this cycle
        self.waiting: list[Wait] = []
        self.preempting_eta: dict[int, float] = {}  # waiting job id -> when its victims are gone
        self.reservations: dict[tuple[str, str], Reservation] = {}  # (pool, model) -> backfill reservation
        self.reserved_nodes: dict[int, Reservation] = {}  # node order -> its reservation
        self.blocked_by: dict[tuple[str, str], int] = {}  # strict order: group -> first blocked job
        self.claims = 0  # claims of stopping jobs' devices so far (only grows: memo stamps read it)
        self._undo: list[tuple[Callable, tuple]] = []

    # -- operations ----------------------------------------------------------------------------------

    def start(self, job: JobInfo, group: Group, placements: tuple[Placement, ...], amount: float,
              end: float | None) -> None:
        """Start ``job`` on ``placements`` in ``group``, charging ``amount`` GPUs to its team; a start that
        outlives a reservation eats into the reserved nodes' slack (``end``: when it ends, None: unknown)."""
        s = self.session
        quota = s.quota
        before = quota.borrowed(job.team, group.model)
        s.cluster.take(job, placements)
        quota.charge(job.team, group.model, group.pool, amount)
        if not job.preemptible:
            quota.non_preemptible[(job.team, group.model)] += amount
        s.free_of_model[group.model] -= amount
        borrowed = quota.borrowed(job.team, group.model) - before
        self.starts.append(Start(job.id, placements, borrowed=R.num(max(borrowed, 0.0))))
        slack = self._charge_reservations(placements, end)
        self._undo.append((self._unstart, (job, group, placements, amount, slack)))

    def _unstart(self, job: JobInfo, group: Group, placements: tuple[Placement, ...], amount: float,
                 slack: list[tuple[int, float]]) -> None:
        s = self.session
        for order, old in reversed(slack):
            self.reserved_nodes[order].slack[order] = old
        self.starts.pop()
        s.free_of_model[group.model] += amount
        if not job.preemptible:
            s.quota.non_preemptible[(job.team, group.model)] -= amount
        s.quota.charge(job.team, group.model, group.pool, -amount)
        s.cluster.give_back(job, placements)

    def _charge_reservations(self, placements: tuple[Placement, ...], end: float | None) -> list:
        """Reserved nodes' slack used by a start that outlives their reservation; returns the old values."""
        if not self.reserved_nodes:
            return []
        per_node: dict[int, float] = {}
        devices = self.session.cluster.devices
        for p in placements:
            order = devices[p.gpu_id].node.order
            per_node[order] = per_node.get(order, 0.0) + 1.0
        old = []
        for order, count in per_node.items():
            res = self.reserved_nodes.get(order)
            if res is not None and (end is None or end > res.start + EPS):
                old.append((order, res.slack.get(order, 0.0)))
                res.slack[order] = res.slack.get(order, 0.0) - count
        return old

    def evict(self, victim: Running, model: str, preemption: Preemption) -> None:
        """Preempt ``victim`` (its devices stay held until its node confirms it gone; its GPUs of ``model``
        count as leaving its team, so reclaim does not take them twice)."""
        s = self.session
        amount = sum(victim.shares.values())
        self.preemptions.append(preemption)
        self.victims.add(victim.job.id)
        if s.victim_index is not None:
            s.victim_index.leave(victim)
        s.quota.release(victim.job.team, model, amount)
        self._undo.append((self._unevict, (victim, model, amount)))

    def _unevict(self, victim: Running, model: str, amount: float) -> None:
        s = self.session
        s.quota.leaving[(victim.job.team, model)] -= amount
        if s.victim_index is not None:
            s.victim_index.come_back(victim)
        self.victims.discard(victim.job.id)
        self.preemptions.pop()

    def hold(self, job: JobInfo, group: Group, req: Request, idle: tuple[Placement, ...], eta: float) -> None:
        """Keep devices for ``job``, which starts at ``eta`` once its victims (or stopping jobs) are gone:
        the ``idle`` devices it also needs are taken now, and its GPUs are charged to its team."""
        s = self.session
        if idle:
            s.cluster.take(job, idle)
        s.quota.charge(job.team, group.model, group.pool, req.amount)
        self.preempting_eta[job.id] = eta
        self._undo.append((self._unhold, (job, group, req, idle)))

    def _unhold(self, job: JobInfo, group: Group, req: Request, idle: tuple[Placement, ...]) -> None:
        s = self.session
        del self.preempting_eta[job.id]
        s.quota.charge(job.team, group.model, group.pool, -req.amount)
        if idle:
            s.cluster.give_back(job, idle)

    def claim(self, node_name: str, device_ids: list[int]) -> None:
        """Claim the devices of stopping jobs among ``device_ids`` on ``node_name`` for a waiting job."""
        stopping = self.session.stopping
        held = stopping.get(node_name, {})
        taken = {i: held.pop(i) for i in device_ids if i in held}
        if node_name in stopping and not held:
            del stopping[node_name]
        self._undo.append((self._unclaim, (node_name, taken)))

    def _unclaim(self, node_name: str, taken: dict[int, float]) -> None:
        if taken:
            self.session.stopping.setdefault(node_name, {}).update(taken)

    def count_claim(self) -> None:
        """One more claim this cycle (stamps of failed claims go stale)."""
        self.claims += 1

    def reserve(self, gkey: tuple[str, str], res: Reservation) -> None:
        """Backfill: reserve ``res``'s nodes for the group's first blocked job."""
        cluster = self.session.cluster
        self.reservations[gkey] = res
        mine = []
        for order in res.slack:
            if order not in self.reserved_nodes:
                self.reserved_nodes[order] = res
                mine.append(order)
            cluster.touch(cluster.node_by_order[order])
        self._undo.append((self._unreserve, (gkey, res, mine)))

    def _unreserve(self, gkey: tuple[str, str], res: Reservation, mine: list[int]) -> None:
        cluster = self.session.cluster
        del self.reservations[gkey]
        for order in mine:
            del self.reserved_nodes[order]
        for order in res.slack:
            cluster.touch(cluster.node_by_order[order])

    def block(self, gkey: tuple[str, str], job_id: int) -> None:
        """Strict order (no backfill): the group's first blocked job holds it for everyone behind."""
        if gkey not in self.blocked_by:
            self.blocked_by[gkey] = job_id
            self._undo.append((self.blocked_by.pop, (gkey,)))

    def wait(self, job: JobInfo, reason: Reason, group: Group | None = None, req: Request | None = None) -> None:
        """Record that ``job`` waits this cycle, and why (its estimate is filled in after the walk)."""
        self.waiting.append((job, reason, group, req))
        self._undo.append((self.waiting.pop, ()))

    def wait_alike(self, jobs: list[JobInfo], record: tuple) -> None:
        """Record that each of ``jobs`` waits for the same ``record`` (reason, group, request)."""
        waiting = self.waiting
        n = len(waiting)
        waiting.extend((job,) + record for job in jobs)
        self._undo.append((waiting.__delitem__, (slice(n, None),)))

    # -- commit and discard --------------------------------------------------------------------------

    def commit(self) -> None:
        """Make every operation since the last commit final."""
        self._undo.clear()

    def discard(self) -> None:
        """Undo every operation since the last commit, newest first."""
        undo = self._undo
        while undo:
            fn, args = undo.pop()
            fn(*args)
