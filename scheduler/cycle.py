"""The scheduling cycle: snapshot -> core -> decisions persisted atomically, single-flight.

Safe to run twice or concurrently: a PostgreSQL advisory lock makes it single-flight, the snapshot is
re-read from the database each time, and every write is a guarded update.
"""

import logging
import time
from dataclasses import asdict, dataclass, field

from django.db import transaction

from portal import locks
from scheduler import wake
from scheduler.core import reasons as R
from scheduler.core import schedule
from scheduler.dispatch import end_never_satisfied, expire_time_limits, mark_held, persist_decisions, reclaim_idle
from scheduler.holds import hold_back
from scheduler.models import SchedulerBeat
from scheduler.selectors_policies import policy_active
from scheduler.services.common import db_now
from scheduler.services.jobs import wake_cycle
from scheduler.snapshot import JobInfos, build_snapshot

log = logging.getLogger(__name__)
# The jobs' views of this process's last cycle: a cycle builds only those of the jobs that changed since.
_JOB_INFOS = JobInfos()


@dataclass
class CycleReport:
    """What one cycle did and how long its phases took (milliseconds)."""

    ran: bool
    started: int = 0
    refused: int = 0
    preempted: int = 0
    pending: int = 0
    timed_out: int = 0
    reclaimed: int = 0
    # Seconds until the first borrower a job waits to reclaim from may be reclaimed (its minimum runtime or
    # reclaim's hysteresis ends), when some job waits so; ``scheduler.tasks`` asks for a cycle then.
    reclaim_in_s: float | None = None
    # The stored policy version the cycle scheduled with (``scheduler.selectors_policies.policy_active``).
    policy: str = ""
    phases_ms: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def run_cycle() -> CycleReport:
    """Run one scheduling cycle unless another is running (then return ``ran=False`` at once)."""
    phases: dict[str, float] = {}
    with transaction.atomic():
        if not locks.try_xact_lock(locks.SCHEDULING_CYCLE):
            return CycleReport(ran=False)
        wake.cycle_claim()  # before reading: a wake-up from now on asks for the next cycle
        t0 = time.perf_counter()
        now = db_now()
        timed_out = expire_time_limits(now)
        reclaimed = reclaim_idle(now)
        active = policy_active()
        snapshot, gpu_nodes = build_snapshot(now, active.policy, infos=_JOB_INFOS)
        snapshot, held = hold_back(snapshot)  # budgets, dependencies, array caps: never given to the engine
        t1 = time.perf_counter()
        decisions = schedule(snapshot)
        t2 = time.perf_counter()
        result = persist_decisions(decisions, gpu_nodes, now)
        if held:
            mark_held(held, now)
            if end_never_satisfied(held, now):
                wake_cycle()  # their own dependents are judged next
        # The nodes whose assignments changed hear it on commit (their next heartbeat would, a beat later).
        wake.nodes_notify({gpu_nodes[p.gpu_id] for s in decisions.starts for p in s.placements})
        wake.holders_notify([*timed_out, *reclaimed, *(p.job_id for p in decisions.preemptions)])
        SchedulerBeat.record(SchedulerBeat.CYCLE, now)
        t3 = time.perf_counter()
    phases = {"snapshot": (t1 - t0) * 1000, "engine": (t2 - t1) * 1000, "persist": (t3 - t2) * 1000}
    reclaim_at = [p.reason.details["reclaimable_at"] for p in decisions.pending
                  if p.reason.code == R.WAITING_FOR_RECLAIM and "reclaimable_at" in p.reason.details]
    report = CycleReport(
        ran=True, started=result.started, refused=result.refused, preempted=result.preempted,
        pending=result.pending_updated, timed_out=len(timed_out), reclaimed=len(reclaimed), phases_ms=phases,
        reclaim_in_s=max(min(reclaim_at) - snapshot.now, 0.0) if reclaim_at else None, policy=active.label,
    )
    if result.started or result.preempted or result.refused:
        log.info("cycle: %s", report.as_dict())
    return report
