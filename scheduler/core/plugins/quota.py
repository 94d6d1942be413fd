"""Quota and borrowing plugin: may a team take these GPUs (fits), and how idle capacity is lent.

Rules (DESIGN: quota): a team holds at most its ``limit`` of a model (its parents' limits too); above its
``guarantee`` it borrows idle capacity of others, if the policy allows borrowing, never others' never-lent
part, and within its weighted share of what is borrowable while other borrowers wait; non-preemptible work
must fit in the guarantee. The numbers live in ``quota.QuotaBook``; this plugin is what actions call.
Reclaim's victims (borrowers' jobs) are chosen by ``victims.VictimIndex`` under the same book.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from scheduler.core.cluster import EPS, Group
from scheduler.core.session import Look, Session
from scheduler.core.types import JobInfo, Reason

NAME = "quota"


def fits(s: Session, job: JobInfo, group: Group, amount: float) -> Reason | None:
    """None when the quota admits ``amount`` GPUs of ``job`` in ``group``; else why not. A refusal is
    remembered for the session (usage only grows); an admission until the model's next charge."""
    memo = s.memo
    key = (job.team, group.model, group.pool, amount, job.preemptible)
    blocked = memo.quota_blocked.get(key)
    if blocked is not None:
        return blocked
    version = s.quota.version[group.model]
    if memo.quota_ok.get(key) == version:
        return None
    blocked = s.quota.check_limit(job.team, group.model, group.pool, amount)
    if blocked is None:
        blocked = s.quota.check_guarantee(
            job.team, group.model, amount, job.preemptible, s.policy.borrowing,
            s.free_of_model[group.model], s.nl_teams.get(group.model, []))
    if blocked is not None:
        memo.quota_blocked[key] = blocked
    else:
        memo.quota_ok[key] = version
    return blocked


def within_guarantee(s: Session, look: Look) -> bool:
    """Whether a job of ``look`` would start inside its team's guarantee of some model it accepts (jobs
    that only wait, being unsatisfiable, count as inside: their place in the walk changes nothing).
    Remembered on the look until the next charge of quota."""
    charges = s.quota.charges
    if look.within_at != charges:
        within = s.quota.within_guarantee
        look.within = look.reason is not None or any(within(look.team, g.model, look.amount) for g in look.groups)
        look.within_at = charges
    return look.within


def plan_borrowing(s: Session, looks: Iterable[Look]) -> None:
    """Find, per model, the teams that borrow or would borrow, and split borrowable capacity among them by
    weight (``looks``: those of the waiting jobs, each once)."""
    if not s.policy.borrowing:
        return
    quota = s.quota
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
            if cell in quota.weight and quota.team_used(team, model) + amount > quota.guaranteed.get(cell, 0.0) + EPS:
                borrowers[model].add(team)
    quota.plan_borrowing(dict(s.free_of_model), borrowers)
