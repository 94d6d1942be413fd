"""Estimate: for the jobs that wait after the walk, their queue position and when each may start.

Jobs waiting for preemption victims start after the victims' grace period; jobs waiting for room in a
group consume that group's free-capacity profile in queue order (``backfill.Profile``), or start at their
reservation; jobs over a quota limit start when enough of their team's running jobs reach their time limit.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.core import reasons as R
from scheduler.core.cluster import EPS
from scheduler.core.session import Session
from scheduler.core.types import HELD, PendingInfo, Reason


def run(s: Session) -> tuple[PendingInfo, ...]:
    """Queue positions and estimated starts for every waiting job, in queue order. A held job has neither:
    the walk skips it, so it stands nowhere in the queue until it is released."""
    st = s.statement
    waiting = st.waiting
    if not s.snapshot.estimate_starts:
        new = tuple.__new__  # PendingInfo(job.id, reason, pos, None), without the keyword-argument layer
        plain = []
        pos = 0
        for job, reason, _group, _req in waiting:
            held = job.state == HELD
            pos += not held
            plain.append(new(PendingInfo, (job.id, reason, None if held else pos, None)))
        return tuple(plain)
    out: list[PendingInfo] = []
    append = out.append
    timeline = s.timeline
    res_by_job = {r.job_id: r for r in st.reservations.values()}
    quota_eta: dict[tuple, float | None] = {}
    profiles: dict[int, Callable] = {}  # id(group) -> its profile's estimate
    preempting, preempting_eta = R.PREEMPTING, st.preempting_eta
    pos = 0
    for job, reason, group, req in waiting:
        if job.state == HELD:
            append(PendingInfo(job.id, reason, None, None))
            continue
        pos += 1
        est: float | None = None
        code = reason.code
        if code == preempting:
            est = preempting_eta.get(job.id)
        elif group is not None and req is not None:
            estimate = profiles.get(id(group))
            if estimate is None:
                estimate = profiles[id(group)] = timeline.profile(group).estimate
            if res_by_job:
                res = res_by_job.get(job.id)
                est = estimate(req.amount, job.time_limit_s, res.start if res else None)
                if res is not None:
                    est = res.start
            else:
                est = estimate(req.amount, job.time_limit_s, None)
        elif code == R.WAITING_FOR_RECLAIM:
            at = reason.details.get("reclaimable_at")
            est = float(at) if isinstance(at, (int, float)) else None
        elif code in (R.QUOTA_EXCEEDED, R.OVER_LIMIT):
            key = (job.team, reason.details.get("gpu_model"), reason.details.get("requested"))
            if key not in quota_eta:
                quota_eta[key] = _quota_eta(s, job.team, key[1], reason)
            est = quota_eta[key]
        append(PendingInfo(job.id, reason, pos, est))
    return tuple(out)


def _quota_eta(s: Session, team: str, model, reason: Reason) -> float | None:
    """When enough of the team's running jobs end for its limit to admit the job; None if unknown."""
    details = reason.details
    limit, in_use, need = details.get("limit"), details.get("in_use"), details.get("requested")
    number = (int, float)
    if not isinstance(limit, number) or not isinstance(in_use, number) or not isinstance(need, number):
        return None
    excess = in_use + need - limit
    if excess > limit + EPS and limit < need:
        return None
    ends = []
    for rec in s.running_by_team.get((team, model), ()):
        job = rec.job
        if job.time_limit_s is None or job.started_at is None:
            continue
        ends.append((max(job.started_at + job.time_limit_s, s.now), sum(rec.shares.values())))
    ends.sort()
    freed = 0.0
    for t, share in ends:
        freed += share
        if freed >= excess - EPS:
            return t
    return None
