"""The work a preemption lost, recorded when the preemption completes (rules in ``scheduler.checkpoints``)."""

from datetime import datetime

from scheduler.checkpoints import lost_gpu_seconds, work_since
from scheduler.models import Allocation, Job, Preemption


def preemption_complete(job: Job, now: datetime) -> Preemption | None:
    """The preempted attempt of ``job`` has ended (every allocation closed, the job not yet requeued): record
    on its ``Preemption`` row the work it lost, from its last checkpoint (or start) to the end of each
    allocation. Call inside the transaction that settles the job. None when no preemption was recorded for
    the attempt."""
    row = Preemption.objects.select_for_update().filter(job=job, attempt=job.attempt, completed_at__isnull=True)
    preemption = row.order_by("-at").first()
    if preemption is None:
        return None
    held = list(Allocation.objects.filter(job=job, attempt=job.attempt).values_list(
        "share_milli", "started_at", "ended_at"))
    start = job.started_at or min((s for _m, s, _e in held), default=None)
    since = work_since(start, job.last_checkpoint_at)
    if since is None:
        lost = 0.0
    else:
        lost = lost_gpu_seconds(((m / 1000, s.timestamp(), (e or now).timestamp()) for m, s, e in held),
                                since.timestamp())
    Preemption.objects.filter(pk=preemption.pk).update(gpu_seconds_lost=lost, work_since=since, completed_at=now)
    preemption.refresh_from_db()
    return preemption
