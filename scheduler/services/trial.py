"""One trial of the real engine for one job: the snapshot with ``job`` in it (in place of its own row, if
it has one) goes through ``schedule()`` exactly as the cycle runs it, with the waiting work that
``scheduler.holds`` keeps out (a spent enforced budget, an array's cap) held back. Read-only: the quote
and "what would make it start" both ask it."""

import dataclasses
from typing import NamedTuple

from scheduler.core import schedule
from scheduler.core.types import PENDING, PendingInfo, Reason, Snapshot, Start
from scheduler.holds import hold_back


class Outcome(NamedTuple):
    """What the engine decides for the trial job: started now (``start``) or waiting (``pending``)."""

    start: Start | None
    pending: PendingInfo | None


def trial(snapshot: Snapshot, job) -> Outcome:
    """Run one cycle on ``snapshot`` with ``job`` (a ``JobInfo``, waiting) in it, and return its outcome."""
    job = dataclasses.replace(job, state=PENDING, placements=())
    jobs = tuple(j for j in snapshot.jobs if j.id != job.id) + (job,)
    # As the cycle does: work held back before placement (a spent budget, an array's cap) stays out.
    snapshot, held = hold_back(dataclasses.replace(snapshot, jobs=jobs))
    if job.id in held:
        hold = held[job.id]
        return Outcome(None, PendingInfo(job.id, Reason(hold.code, hold.message, hold.details), None, None))
    decisions = schedule(snapshot)
    start = next((s for s in decisions.starts if s.job_id == job.id), None)
    pending = next((p for p in decisions.pending if p.job_id == job.id), None)
    return Outcome(start, pending)
