"""Backfill: a job that cannot start holds its place, and later jobs may use what it cannot yet.

EASY backfill (the policy's ``backfill``): the first blocked job of a group (pool × GPU model) reserves the
earliest time its devices free up (``timeline.Timeline.reserve``; inside one switch or NVLink domain for a
gang bound to one, ``topology``); later jobs may start on the reserved nodes only if they end before that
time or take no more than the nodes' slack. Work inside its team's guarantee
is never kept off by a borrower's reservation. Without backfill the first blocked job holds the whole group
for everyone behind it (strict order). A blocked job is then told why it waits: reclaim under way (see
``actions.reclaim``), an incomplete gang, or not enough free devices, with the numbers.
"""

from __future__ import annotations

from scheduler.core import reasons as R
from scheduler.core import topology
from scheduler.core.actions import reclaim
from scheduler.core.cluster import EPS, Group, Node
from scheduler.core.placement import Request
from scheduler.core.plugins import gang, placement, priority
from scheduler.core.session import Look, Session
from scheduler.core.timeline import Reservation
from scheduler.core.types import JobInfo, Placement, Reason

_reason = R.reasoner("priority")  # reasons of the priority plugin


def block(s: Session, job: JobInfo, req: Request, group: Group) -> None:
    """The job waits for resources: reserve for it (first blocked job of the group), say why."""
    st = s.statement
    gkey = (group.pool, group.model)
    if not s.policy.backfill:
        st.block(gkey, job.id)
    elif gkey not in st.reservations:
        bound = topology.block_orders(group) if gang.bound_to_block(group, req) else None
        res = s.timeline.reserve(group, req, job.id, bound)
        if res is not None:
            res.borrowing = not s.quota.within_guarantee(job.team, group.model, req.amount)
            st.reserve(gkey, res)
    if s.reclaim_open and s.policy.reclaim and s.policy.borrowing and s.policy.preemption \
            and priority.may_preempt(job, s.classes):
        waiting = reclaim.wait_reason(s, job, req, group)
        if waiting is not None:
            st.wait(job, waiting)
            return
    key = (id(group), id(req))
    hit = s.memo.waits.get(key)
    if hit is None or hit[0] != group.version:
        hit = s.memo.waits[key] = (group.version, placement.waiting(req, group))
    st.wait(job, hit[1], group, req)


def vetoed(s: Session, job: JobInfo, group: Group, res: Reservation | None, end: float | None,
           amount: float) -> bool:
    """Whether the group's reservation (if any) keeps ``job`` off its reserved devices: the job would run
    past the reserved start, and it is not work inside its team's guarantee facing a borrower's
    reservation (a borrower never keeps an owner from its guaranteed capacity)."""
    if res is None or (end is not None and end <= res.start + EPS):
        return False
    return not (res.borrowing and s.quota.within_guarantee(job.team, group.model, amount))


def vetoes(s: Session, job: JobInfo, look: Look, end: float | None) -> tuple:
    """Per group of ``look``, whether its reservation keeps ``job`` off (``vetoed``); empty when no group
    has one. Remembered per ``look.vetoes_key`` and time limit until a reservation is added or quota moves
    (what vetoes read: reservations, and whether work is inside its team's guarantee)."""
    memo, st = s.memo, s.statement
    reservations = st.reservations
    if memo.vetoes_at != s.quota.charges or memo.vetoes_res != len(reservations):
        memo.vetoes_of.clear()
        memo.vetoes_at, memo.vetoes_res = s.quota.charges, len(reservations)
    key = (look.vetoes_key, job.time_limit_s)
    known = memo.vetoes_of.get(key)
    if known is not None:
        return known
    out: tuple = ()
    if any((g.pool, g.model) in reservations for g in look.groups):
        out = tuple(vetoed(s, job, g, reservations.get((g.pool, g.model)), end, look.amount) for g in look.groups)
    memo.vetoes_of[key] = out
    return out


def place(s: Session, group: Group, req: Request, spread: bool, vetoed: bool) -> tuple[Placement, ...] | None:
    """Devices for ``req`` in ``group`` (kept off reserved nodes' devices when ``vetoed``), remembered
    until the group changes."""
    key = (id(group), id(req), spread, vetoed)
    hit = s.memo.placed.get(key)
    if hit is not None and hit[0] == group.version:
        return hit[1]
    placements = placement.place(s.cluster, group, req, spread, (lambda node, taken: _veto(s, node, taken))
                              if vetoed else None)
    s.memo.placed[key] = (group.version, placements)
    return placements


def _veto(s: Session, node: Node, taken: float) -> bool:
    """The reservation rule for a job that would run past the reserved start: at most the node's slack."""
    res = s.statement.reserved_nodes.get(node.order)
    return res is not None and max(taken, 1.0) > res.slack.get(node.order, 0.0) + EPS


def behind_reason(s: Session, group: Group, gkey: tuple[str, str]) -> Reason:
    """Strict order: the group's first blocked job holds it for everyone behind."""
    reason = s.memo.priority_reasons.get(gkey)
    if reason is None:
        first = s.statement.blocked_by[gkey]
        reason = s.memo.priority_reasons[gkey] = _reason(
            R.PRIORITY, f"waits behind job {first} for {group.model} in pool {group.pool} "
            "(strict queue order, no backfill)", blocked_by=first, gpu_model=group.model)
    return reason


def reserved_reason(s: Session, group: Group, res: Reservation) -> Reason:
    """Backfill: the free devices are reserved for the group's first blocked job."""
    reason = s.memo.priority_reasons.get(id(res))
    if reason is None:
        reason = s.memo.priority_reasons[id(res)] = _reason(
            R.PRIORITY,
            f"free {group.model} GPUs in pool {group.pool} are reserved for job {res.job_id}, "
            f"which starts in {R.fmt_duration(res.start - s.now)}; this job would run past that",
            reserved_for=res.job_id, reserved_start=res.start, gpu_model=group.model)
    return reason
