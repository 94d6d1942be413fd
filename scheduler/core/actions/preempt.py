"""Preempt: for a job that fits nowhere now, stop running jobs so it starts in a later cycle.

First, devices of jobs already stopping (earlier victims) are claimed if they make the job fit
(``stopping.claim``). Otherwise victims are planned group by group: the priority plugin offers lower-priority
jobs (of the job's team, or of any team with cluster scope, if the job's class may preempt), the quota
plugin offers borrowers' jobs when the job is inside its team's guarantee and reclaim is open
(``actions.reclaim``). The plan is the smallest victim set on one node (or per gang member, inside one
switch or NVLink domain for a gang bound to one: ``topology``), in victim preference order
(``victim_index``, ``preemption.plan_on_nodes``); the quota must admit the job once the team's own victims
are gone. Victims keep their devices this cycle; the job waits (``Preempting``) with what it needs held.
"""

from __future__ import annotations

from scheduler.core import reasons as R
from scheduler.core import stopping, topology
from scheduler.core.cluster import EPS, Group
from scheduler.core.feasibility import shape_text
from scheduler.core.placement import Request
from scheduler.core.plugins import gang
from scheduler.core.preemption import RECLAIM, Plan, eligible, plan_on_nodes
from scheduler.core.session import Session
from scheduler.core.types import JobInfo, Placement, Preemption
from scheduler.core.victim_index import VictimIndex


def run(s: Session, job: JobInfo, req: Request, groups: tuple[Group, ...], allowed: list[Group]) -> bool:
    """Claim devices of stopping jobs, or plan new preemptions; True when the job now waits for them.

    ``allowed``: the groups of ``groups`` whose quota check passed (the admit walk just made them)."""
    if s.stopping:
        for group in allowed:
            if stopping.claim(s, job, req, group):
                return True
    no_plan = s.memo.no_plan
    for group in groups:
        key = (job.team, job.priority, job.preemptible, id(group), id(req))
        if key in no_plan:
            continue
        if group not in allowed and not _credit_may_admit(s, job, req, group):
            no_plan.add(key)
            continue
        plan = _plan(s, job, req, group)
        if plan is None:
            no_plan.add(key)
            continue
        _commit(s, job, req, group, plan)
        return True
    return False


def _credit_may_admit(s: Session, job: JobInfo, req: Request, group: Group) -> bool:
    """For a group the quota refused: whether a plan could pass the quota at all. Only the job's own team's
    victims give credit back, and credit cannot make room for non-preemptible work (it must fit the
    guarantee beside the team's other non-preemptible work) nor create a missing quota row; so without
    such victims, or in those cases, ``_plan`` would search victims only to fail its quota check."""
    quota = s.quota
    model = group.model
    if quota.row(job.team, model, group.pool) is None:
        return False
    if not job.preemptible and (quota.non_preemptible.get((job.team, model), 0.0) + req.amount
                                > quota.guaranteed.get((job.team, model), 0.0) + EPS):
        return False
    pool, now, classes, taken = group.pool, s.now, s.classes, s.statement.victims
    return any(r.job.priority < job.priority and r.pool == pool and eligible(r, classes, now, taken)
               for r in s.running_by_team.get((job.team, model), ()))


def _plan(s: Session, job: JobInfo, req: Request, group: Group) -> Plan | None:
    """The smallest victim set in ``group`` that lets the quota admit ``job``, or None."""
    quota = s.quota
    model = group.model
    amount = req.amount
    index = s.victim_index
    if index is None:
        index = s.victim_index = VictimIndex(s)
    under_guarantee = quota.within_guarantee(job.team, model, amount)
    room: dict[str, float] = {}
    reclaim = s.reclaim_open and under_guarantee and s.policy.borrowing and s.policy.reclaim
    if not index.has_candidates(job, group, reclaim):
        return None
    cands = index.candidates(job, group, reclaim, room)
    if gang.bound_to_block(group, req):
        plan = _plan_in_one_block(s, group, req, cands, room)
    else:
        plan = plan_on_nodes(s.cluster, group, req, cands, room, limit=len(cands))
    if plan is None:
        return None
    # Only the team's own victims give quota back to it (with cluster scope, others' do not).
    credit = sum(sum(r.shares.values()) for r, rule in plan.victims if rule != RECLAIM and r.job.team == job.team)
    if quota.check_limit(job.team, model, group.pool, amount, credit=credit) is not None:
        return None
    if not under_guarantee and quota.check_guarantee(
            job.team, model, amount, job.preemptible, s.policy.borrowing,
            s.free_of_model[model] + credit, s.nl_teams.get(model, []), credit=credit) is not None:
        return None
    return plan


def _plan_in_one_block(s: Session, group: Group, req: Request, cands: list, room: dict[str, float]) -> Plan | None:
    """For a gang that must land inside one topology block: the plan with the fewest victims among the
    plans confined to one block each (ties: the first block by level and name), or None."""
    nodes = s.cluster.nodes
    touched = {nodes[name].order for _key, rec, _rule in cands for name in rec.nodes}
    best: Plan | None = None
    for within in topology.block_orders(group):
        if touched.isdisjoint(within):
            continue  # no victim there: the block's free nodes alone do not hold the gang (placement said so)
        plan = plan_on_nodes(s.cluster, group, req, cands, room, limit=len(cands), within=within)
        if plan is not None and (best is None or len(plan.victims) < len(best.victims)):
            best = plan
            if len(plan.victims) == 1:
                break  # nothing smaller exists
    return best


def _commit(s: Session, job: JobInfo, req: Request, group: Group, plan: Plan) -> None:
    """Evict the plan's victims, hold what the job needs, and tell the job why it waits."""
    st = s.statement
    grace = 0.0
    ids: list[int] = []
    own: list[int] = []  # victims of the waiting job's own team
    used = s.quota.team_used(job.team, group.model)  # what the job's team holds before the job
    guaranteed = s.quota.guaranteed.get((job.team, group.model), 0.0)
    for rec, rule in plan.victims:
        victim = rec.job
        cls = s.classes.get(victim.priority_class)
        g = cls.grace_period_s if cls else 30.0
        grace = max(grace, g)
        since = victim.last_checkpoint_at if victim.last_checkpoint_at is not None else victim.started_at
        lost = max(s.now - since, 0.0) * sum(rec.shares.values()) if since is not None else 0.0
        if rule == RECLAIM:
            msg = (f"reclaim: team {job.team} takes back guaranteed {group.model} for job {job.id}; "
                   f"team {victim.team} borrows {R.fmt_gpus(s.quota.borrowed(victim.team, group.model))} "
                   f"above its guarantee (quota plugin: team {job.team} holds {R.fmt_gpus(used)} of its "
                   f"{R.fmt_gpus(guaranteed)} guaranteed and needs {R.fmt_gpus(req.amount)})")
        elif s.policy.ordering == "las" and s.policy.las_thresholds_gpu_s:
            msg = (f"preempted by job {job.id} of team {job.team}, which has received less GPU time "
                   f"(least-attained-service rank {job.priority} > {victim.priority}; priority plugin)")
        else:
            msg = (f"preempted by job {job.id} of team {job.team} (priority {job.priority} > {victim.priority}; "
                   "priority plugin)")
        st.evict(rec, group.model, Preemption(victim.id, job.id, rule, msg, gpu_seconds_lost=lost,
                                              grace_period_s=g))
        ids.append(victim.id)
        if victim.team == job.team:
            own.append(victim.id)
    want = req.fraction if req.fraction is not None else 1.0
    st.hold(job, group, req, tuple(Placement(i, want) for i in plan.free_devices), s.now + grace)
    # The waiting job's team reads this reason: it names the team's own victims, and only counts other
    # teams' (their job ids are theirs to see).
    others = len(ids) - len(own)
    whose = "; ".join(filter(None, (
        f"your team's {', '.join(map(str, own))}" if own else "",
        f"{others} of other teams" if others else "")))
    st.wait(job, R.reason(
        R.PREEMPTING,
        f"preempting {len(ids)} job(s) ({whose}) to free {shape_text(req)} of "
        f"{group.model}; starts after their grace period ({grace:g} s)",
        victims=own, victims_of_other_teams=others, gpu_model=group.model, grace_period_s=grace,
        plugin="+".join(sorted({"quota" if rule == RECLAIM else "priority" for _rec, rule in plan.victims}))),
        group, req)
