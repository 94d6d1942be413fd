"""Checkpoints and the work preemption loses (rules in ``scheduler.checkpoints``).

A checkpoint is reported by the job's node (``$ROTA_CHECKPOINT_FILE`` changed: a ``checkpoint`` job event,
docs/node-protocol.md) or by a member of the job's team (``POST /api/v1/jobs/{id}/checkpoint/``, ``rota
checkpoint``); either sets ``Job.last_checkpoint_at`` with a guarded update. When a preempted attempt's
processes are gone, ``scheduler.services.lost_work`` records the work it lost.
"""

from datetime import datetime

from django.db import transaction

from portal.access import role_in
from scheduler.checkpoints import checkpoint_accepted
from scheduler.models import Job, Node
from scheduler.models.jobs import JobState
from scheduler.services.common import db_now
from scheduler.services.jobs import NotAllowed
from scheduler.services.node_jobs import _not_current, _reported_attempt
from scheduler.services.nodes import NodeProtocolError


class NotRunning(Exception):
    """The job has no running attempt to checkpoint (the message says what it is doing)."""


def _record(job_id: int, attempt: int, at: datetime, now: datetime) -> tuple[bool, datetime | None]:
    """Record a checkpoint at ``at`` for ``attempt`` of job ``job_id`` if the rules accept it; returns
    (recorded, the job's last checkpoint now). One guarded UPDATE: the job must still run that attempt and its
    recorded checkpoint must not have moved past ``at`` meanwhile."""
    job = Job.objects.filter(pk=job_id).values("state", "attempt", "started_at", "admitted_at",
                                               "last_checkpoint_at").first()
    if job is None or job["state"] != JobState.RUNNING or job["attempt"] != attempt:
        return False, job["last_checkpoint_at"] if job else None
    accepted = checkpoint_accepted(at, started=job["started_at"], last=job["last_checkpoint_at"], now=now,
                                   admitted=job["admitted_at"])
    if accepted is None:
        return False, job["last_checkpoint_at"]
    updated = Job.objects.filter(
        pk=job_id, state=JobState.RUNNING, attempt=attempt, last_checkpoint_at=job["last_checkpoint_at"]
    ).update(last_checkpoint_at=accepted)
    if not updated:  # another report moved it meanwhile: whichever is later stays
        return _record(job_id, attempt, at, now)
    return True, accepted


def job_checkpoint(*, user, job: Job) -> Job:
    """A member of the job's own team says its running attempt has just saved its work (now, by the
    database's clock). Platform admins outside the team may not: a checkpoint changes what the team is
    credited for a later preemption."""
    if role_in(user, job.team) is None:
        raise NotAllowed(f"only members of team {job.team.name} may report a checkpoint of its job")
    with transaction.atomic():
        now = db_now()
        fresh = Job.objects.filter(pk=job.pk).values_list("state", "attempt").first()
        if fresh is None or fresh[0] != JobState.RUNNING:
            raise NotRunning(f"job {job.pk} is {fresh[0] if fresh else 'gone'}: only a running job can "
                             "report a checkpoint")
        _record(job.pk, fresh[1], now, now)
    job.refresh_from_db()
    return job


def node_job_checkpoint(*, node: Node, job_id: int, event: dict) -> tuple[Job, bool]:
    """A node reports that the running attempt's checkpoint file changed at ``event["at"]`` (a datetime).
    The node must hold that attempt (404 for a job it never held, 409 for another attempt). Returns the job
    and whether the checkpoint was recorded (an older one, or one before the attempt started, is not)."""
    with transaction.atomic():
        now = db_now()
        job, holds = _reported_attempt(node, job_id, event["attempt"], now=now)
        if not holds or event["attempt"] != job.attempt:
            raise _not_current(job, event["attempt"]) if event["attempt"] != job.attempt else NodeProtocolError(
                f"attempt {event['attempt']} of job {job_id} no longer runs on this node", status=409,
                field="attempt")
        recorded, _last = _record(job_id, event["attempt"], event["at"], now)
    job.refresh_from_db()
    return job, recorded
