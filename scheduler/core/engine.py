"""One scheduling cycle: ``schedule(snapshot) -> Decisions``.

The shape of Volcano and KAI-Scheduler: a ``Session`` (the cycle's working copy of the snapshot) is opened,
the queue is put in policy order, and the actions run in order:

1. **admit** (``actions.admit``): walk the queue; start each job where the quota admits it and devices fit.
   A job that starts nowhere goes on, in the same walk, to
2. **reclaim** and **preempt** (``actions.reclaim``, ``actions.preempt``): claim devices of stopping jobs,
   or plan victims — borrowers' jobs for work inside its guarantee, lower-priority jobs for the rest;
3. **backfill** (``actions.backfill``): else it reserves its group for later (or blocks it, in strict
   order) and is told why it waits;
4. **estimate** (``actions.estimate``): every waiting job gets its queue position and estimated start.

Every change goes through the session's ``Statement``. Deterministic: inputs are sorted, ties break on job
id, node name and device index, and no clock is read (time is ``snapshot.now``).
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.core.actions import admit, estimate
from scheduler.core.loans import with_loans
from scheduler.core.plugins import priority
from scheduler.core.plugins import quota as quota_plugin
from scheduler.core.session import Session
from scheduler.core.types import HELD, PENDING, Decisions, Snapshot

Timer = Callable[[str], None]


def schedule(snapshot: Snapshot, timer: Timer | None = None) -> Decisions:
    """Run one scheduling cycle over ``snapshot`` and return what to start, preempt and report.

    Deterministic: the same snapshot always gives the same decisions. ``timer``, when given, is called
    with a phase name as each phase ends (the core reads no clock; callers measure).
    """
    tick = timer or _no_timer
    snapshot = priority.ranked(with_loans(snapshot))
    s = Session(snapshot)
    tick("index")
    queue = sorted((j for j in snapshot.jobs if j.state == PENDING or j.state == HELD), key=priority.order(snapshot))
    pairs = [(job, None if job.state == HELD else s.look_of(job)) for job in queue]
    quota_plugin.plan_borrowing(s, (look for look in dict.fromkeys(look for _job, look in pairs) if look))
    tick("order")
    admit.run(s, pairs)  # admit, and for what waits: reclaim, preempt, backfill
    tick("place")
    pending = estimate.run(s)
    tick("estimate")
    st = s.statement
    stats = dict(s.stats)
    stats["started"] = len(st.starts)
    stats["pending"] = len(pending)
    stats["preempted"] = len(st.preemptions)
    stats["reservations"] = len(st.reservations)
    decisions = Decisions(starts=tuple(st.starts), preemptions=tuple(st.preemptions), pending=pending,
                          stats=dict(sorted(stats.items())))
    tick("report")
    return decisions


def _no_timer(_phase: str) -> None:
    """No caller timing the phases."""
