"""Admit: walk the queue in policy order and start every job that fits now.

For each waiting job, in queue order, the groups (pool × GPU model) that could ever hold it are tried in
turn: the quota plugin must admit it there (limits, guarantee, borrowing), strict order and backfill
reservations must let it pass (``actions.backfill``), and the placement plugin must find devices. The first
group that passes starts the job. A job that starts nowhere goes to the next actions: preempt (victims for
it, or devices of stopping jobs), then backfill (it reserves its group, or is told why it waits).

With the policy's ``guarantee_first`` the walk runs in two passes per priority level, like Kueue's
non-borrowing-first admission: first the work inside its team's guarantee, then the work that would borrow,
behind which reclaim is closed (``actions.reclaim``).

Runs of jobs that look alike to the walk (``session.Look``: same team, request, class…) usually end alike:
when a job waits and nothing it read changed, the jobs of its look right behind it wait for the same
reason without a walk of their own (``follow``); tests turn this off and compare every decision.
"""

from __future__ import annotations

from scheduler.core import reasons as R
from scheduler.core.actions import backfill, preempt, reclaim
from scheduler.core.cluster import Group
from scheduler.core.feasibility import Feasibility
from scheduler.core.placement import Request
from scheduler.core.plugins import kinds, priority
from scheduler.core.plugins import quota as quota_plugin
from scheduler.core.session import Look, Session
from scheduler.core.types import HELD, JobInfo, Reason

Pairs = list[tuple[JobInfo, "Look | None"]]
HELD_REASON = R.reason(R.HELD, "held: the scheduler skips this job until it is released", plugin="admit")


def run(s: Session, pairs: Pairs) -> None:
    """Walk ``pairs`` (each waiting job with its look, None for held jobs) in queue order."""
    if not s.policy.guarantee_first:
        try_in_order(s, pairs)
        return
    n, i = len(pairs), 0
    while i < n:  # one priority level at a time
        priority = pairs[i][0].priority
        # A team's head that would borrow waits for the second pass, and so does the rest of that team
        # that wants the same models (a team's own order is kept per model: no small job jumps its big
        # one; work on other models is not held back).
        deferred: Pairs = []
        held_back: dict[str, set[str]] = {}  # team -> models its deferred jobs want
        while i < n and pairs[i][0].priority == priority:
            job, look = pairs[i]
            i += 1
            if look is None:  # held
                try_job(s, job)
                continue
            models = held_back.get(job.team)
            if (not models or models.isdisjoint(look.models)) and quota_plugin.within_guarantee(s, look):
                got = try_job(s, job, look)
                if got is not None:  # its look-alikes right behind it pass the same tests and wait alike
                    i = follow(s, pairs, i, look, job.time_limit_s, got)
            else:
                held_back.setdefault(job.team, set()).update(look.models)
                deferred.append((job, look))
                while i < n and pairs[i][1] is look:  # its look-alikes right behind it: deferred too
                    deferred.append(pairs[i])
                    i += 1
        with reclaim.closed(s):
            try_in_order(s, deferred)


def try_in_order(s: Session, pairs: Pairs) -> None:
    """``try_job`` for each (job, look) of ``pairs`` in order, runs of waiting look-alikes in one step."""
    i, n = 0, len(pairs)
    while i < n:
        job, look = pairs[i]
        i += 1
        got = try_job(s, job, look)
        if got is not None:  # it waits, so it has a look (held jobs have none and return None)
            i = follow(s, pairs, i, look or s.look_of(job), job.time_limit_s, got)


def try_job(s: Session, job: JobInfo, look: Look | None = None) -> tuple | None:
    """Start ``job``, plan preemptions for it, or record why it waits (``look``: its ``look_of``, when the
    caller has it). Returns, when the job waits and nothing changed, what each look-alike with the same
    time limit that comes right after it gets (see ``follow``): (wait record, searches)."""
    st = s.statement
    if job.state == HELD:
        st.wait(job, HELD_REASON)
        st.commit()
        return None
    if look is None:
        look = s.look_of(job)
    if look.reason is not None:
        rec = (look.reason, None, None)
        st.wait(job, *rec)
        st.commit()
        return rec, 0
    end = s.now + job.time_limit_s if job.time_limit_s is not None else None
    groups = look.groups
    vetoes = backfill.vetoes(s, job, look, end) if st.reservations else ()
    state = s.state(groups)
    memo = look.memo.get(vetoes) if s.reuse_waits else None
    if memo is not None and memo[0] == state:
        st.wait(job, *memo[1])
        st.commit()
        if memo[2]:
            s.stats["placement_searches"] += memo[2]
        return memo[1], memo[2]
    stats = s.stats
    searches, full = stats.get("placement_searches", 0), len(s.memo.full)
    waits, starts = len(st.waiting), len(st.starts)
    walk(s, job, look.req, look.feas, look.amount, kinds.spreads(s.policy, job), end)
    st.commit()
    if (s.reuse_waits and len(st.waiting) == waits + 1 and len(st.starts) == starts
            and s.state(groups) == state):
        # The next look-alike skips the groups this walk found full, so it searches that many fewer.
        searches = stats.get("placement_searches", 0) - searches - (len(s.memo.full) - full)
        memo = look.memo[vetoes] = (state, st.waiting[-1][1:], searches)
        return memo[1], memo[2]
    return None


def follow(s: Session, pairs: Pairs, i: int, look: Look, time_limit: float | None, got: tuple) -> int:
    """After a job of ``look`` waited with nothing changed (``got``: what ``try_job`` returned), give the
    look-alikes that follow it from ``pairs[i]`` on the same wait, as ``try_job`` would one by one (same
    look, state and, when reservations exist, time limit: the same vetoes); return where the next
    different job is. A backlog is mostly runs of such jobs (a team's jobs of one shape)."""
    rec, searches = got
    any_limit = not s.statement.reservations
    n, j = len(pairs), i
    while j < n:
        job, other = pairs[j]
        if other is not look or not (any_limit or job.time_limit_s == time_limit):
            break
        j += 1
    if j > i:
        s.statement.wait_alike([job for job, _look in pairs[i:j]], rec)
        s.statement.commit()
        if searches:
            s.stats["placement_searches"] += searches * (j - i)
    return j


def walk(s: Session, job: JobInfo, req: Request, feas: Feasibility, amount: float, spread: bool,
         end: float | None) -> None:
    """Try the job's groups in order: start it, or hand it to preempt and then backfill."""
    st = s.statement
    refusals: list[Reason] = []  # the quota's, one per group it refused
    first_ok: Group | None = None
    reserved_reason: Reason | None = None
    allowed: list[Group] = []  # groups the quota admits the job to (nothing changes until a start)
    memo = s.memo
    for group in feas.groups:
        blocked = quota_plugin.fits(s, job, group, amount)
        if blocked is not None:
            refusals.append(blocked)
            continue
        allowed.append(group)
        if first_ok is None:
            first_ok = group
        gkey = (group.pool, group.model)
        if not s.policy.backfill and gkey in st.blocked_by:
            reserved_reason = reserved_reason or backfill.behind_reason(s, group, gkey)
            continue
        fkey = (id(group), id(req))
        if fkey in memo.full:
            continue
        s.stats["placement_searches"] += 1
        res = st.reservations.get(gkey)
        vetoed = backfill.vetoed(s, job, group, res, end, amount)
        placements = backfill.place(s, group, req, spread, vetoed)
        if placements is None and vetoed and res is not None:  # vetoed: by a reservation
            if backfill.place(s, group, req, spread, False) is not None:
                reserved_reason = reserved_reason or backfill.reserved_reason(s, group, res)
                continue
        if placements is None:
            memo.full.add(fkey)
            continue
        st.start(job, group, placements, amount, end)
        return
    if s.policy.preemption and priority.may_preempt(job, s.classes) and preempt.run(s, job, req, feas.groups, allowed):
        return
    if first_ok is None:
        st.wait(job, refused_everywhere(refusals))
        return
    if reserved_reason is not None:
        st.wait(job, reserved_reason, first_ok, req)
        return
    backfill.block(s, job, req, first_ok)


def refused_everywhere(refusals: list[Reason]) -> Reason:
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
