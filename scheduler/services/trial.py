"""One trial of the real engine for one job: the snapshot with ``job`` in it (in place of its own row, if
it has one) goes through ``schedule()`` exactly as the cycle runs it, with the waiting work of teams past
an enforced budget held back. Read-only: the quote and "what would make it start" both ask it."""

import dataclasses
from typing import NamedTuple

from scheduler.core import schedule
from scheduler.core.types import PENDING, PendingInfo, Reason, Snapshot, Start
from scheduler.cycle import hold_back_over_budget


class Outcome(NamedTuple):
    """What the engine decides for the trial job: started now (``start``) or waiting (``pending``)."""

    start: Start | None
    pending: PendingInfo | None


def trial(snapshot: Snapshot, job) -> Outcome:
    """Run one cycle on ``snapshot`` with ``job`` (a ``JobInfo``, waiting) in it, and return its outcome."""
    job = dataclasses.replace(job, state=PENDING, placements=())
    jobs = tuple(j for j in snapshot.jobs if j.id != job.id) + (job,)
    snapshot, over_budget = hold_back_over_budget(dataclasses.replace(snapshot, jobs=jobs))
    if job.id in over_budget:
        return Outcome(None, PendingInfo(job.id, Reason("BudgetExceeded", over_budget[job.id]), None, None))
    decisions = schedule(snapshot)
    start = next((s for s in decisions.starts if s.job_id == job.id), None)
    pending = next((p for p in decisions.pending if p.job_id == job.id), None)
    return Outcome(start, pending)
