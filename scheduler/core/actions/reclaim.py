"""Reclaim: a team inside its guarantee takes back GPUs that other teams borrow — and only then.

A borrower's job is a reclaim victim only when a waiting job of the owning team is inside its guarantee
after the start, the victim's team stays at or above its own guarantee (``quota.lendable``), the victim has
run its class's minimum runtime and two cycle intervals (hysteresis: work admitted by borrowing is not
taken back in the cycle after it starts, ``preemption.reclaimable_at``), and the victims' GPUs make the job
fit (``actions.preempt``). Reclaim is open only while the walk admits guaranteed work ahead of borrowing:
work deferred behind its team's borrowing head (the second pass of ``guarantee_first``) may not reclaim,
or what it frees would go to the borrowers walked before it, and it would reclaim again next cycle
(ping-pong). A job that could reclaim but whose borrowers are still protected by their minimum runtime is
told when the first one becomes reclaimable.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from scheduler.core import reasons as R
from scheduler.core.cluster import EPS, Group
from scheduler.core.placement import Request
from scheduler.core.preemption import reclaimable_at
from scheduler.core.session import Session
from scheduler.core.types import JobInfo, Reason

_reason = R.reasoner("quota")  # reasons of the quota plugin


@contextmanager
def closed(s: Session) -> Iterator[None]:
    """Reclaim closed while the walk admits work deferred behind borrowing."""
    s.reclaim_open = False
    try:
        yield
    finally:
        s.reclaim_open = True


def wait_reason(s: Session, job: JobInfo, req: Request, group: Group) -> Reason | None:
    """For a job inside its team's guarantee that nothing could be planned for: if borrowers' jobs in the
    group are only protected by their minimum runtime, say when the first becomes reclaimable."""
    quota = s.quota
    model = group.model
    if not quota.within_guarantee(job.team, model, req.amount):
        return None
    used = quota.team_used(job.team, model)
    guaranteed = quota.guaranteed.get((job.team, model), 0.0)
    taken = s.statement.victims
    for (at, _jid), rec in _young_in(s, model, group.pool):
        team = rec.job.team
        if team != job.team and rec.job.id not in taken and quota.lendable(team, model) > EPS:
            return _reason(
                R.WAITING_FOR_RECLAIM,
                f"team {job.team} holds {R.fmt_gpus(used)} of its {R.fmt_gpus(guaranteed)} guaranteed {model}; "
                f"borrowed GPUs in pool {group.pool} can be reclaimed in {R.fmt_duration(at - s.now)}, "
                f"when team {team}'s job {rec.job.id} has run its minimum time",
                gpu_model=model, pool=group.pool, reclaimable_at=at, borrower=team, in_use=R.num(used),
                guaranteed=R.num(guaranteed))
    return None


def _young_in(s: Session, model: str, pool: str) -> list:
    """Running preemptible jobs of the model in the pool not yet reclaimable (minimum runtime, hysteresis),
    by when they become so (built once per session and group)."""
    out = s.memo.young.get((model, pool))
    if out is not None:
        return out
    out = []
    for rec in s.running_by_model.get(model, ()):
        job = rec.job
        if rec.pool != pool or not job.preemptible or job.terminating:
            continue
        at = reclaimable_at(job, s.classes, s.cycle_interval_s)
        if at is not None and at > s.now + EPS:
            out.append(((at, job.id), rec))
    out.sort(key=lambda item: item[0])
    s.memo.young[(model, pool)] = out
    return out
