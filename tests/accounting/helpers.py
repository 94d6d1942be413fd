"""Builders for accounting tests: jobs with allocations at chosen database times."""

from datetime import UTC, datetime
from decimal import Decimal

from scheduler.models import Allocation, Gpu, Job, Preemption, PriorityClass

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def make_job(user, team, *, name="train", kind="training", gpus=1, gpu_fraction=None, attempt=1, state="running"):
    return Job.objects.create(
        team=team,
        submitted_by=user,
        name=name,
        kind=kind,
        command="true",
        gpus=gpus,
        gpu_fraction=Decimal(gpu_fraction) if gpu_fraction is not None else None,
        priority_class=PriorityClass.objects.get(name="training"),
        state=state,
        attempt=attempt,
    )


def allocate(job, gpu: Gpu | str, start, end=None, *, share_milli=1000, attempt=None):
    gpu = Gpu.objects.get(uuid=gpu) if isinstance(gpu, str) else gpu
    return Allocation.objects.create(
        job=job,
        attempt=attempt or job.attempt,
        gpu=gpu,
        node=gpu.node,
        share_milli=share_milli,
        started_at=start,
        ended_at=end,
    )


def preempt(job, at, lost):
    return Preemption.objects.create(
        job=job, attempt=job.attempt, reason="Reclaim", message="reclaimed", gpu_seconds_lost=lost, at=at
    )


def history(job, *steps):
    """Record ``job``'s transitions: ``(to_state, at)`` pairs in order; the job's ``created_at`` becomes the
    first step's time (submission)."""
    from scheduler.models import JobTransition

    previous = ""
    for to_state, at in steps:
        JobTransition.objects.create(job=job, from_state=previous, to_state=to_state, at=at, cause="test")
        previous = to_state
    Job.objects.filter(pk=job.pk).update(created_at=steps[0][1])
