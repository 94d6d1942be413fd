"""Helpers shared by the scheduler services: database time and recorded job transitions."""

from datetime import datetime

from django.db import connection
from django.db.models import DateTimeField, Func
from django.utils import timezone

from scheduler.models import Job, JobTransition
from scheduler.models.jobs import FINAL_STATES
from scheduler.signals import jobs_transitioned


def db_clock() -> Func:
    """``db_now`` as an expression, to read the database's clock with a row instead of a query of its own."""
    return Func(function="clock_timestamp", output_field=DateTimeField())


def db_now() -> datetime:
    """The database's clock (PostgreSQL ``clock_timestamp()``): one clock for every interval we bill."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT clock_timestamp()")
            return cursor.fetchone()[0]
    return timezone.now()


def job_transition(
    job_id: int,
    *,
    from_states: tuple[str, ...],
    to_state: str,
    cause: str,
    at: datetime,
    actor=None,
    details: dict | None = None,
    extra: dict | None = None,
    where: dict | None = None,
) -> bool:
    """Move job ``job_id`` to ``to_state`` only if it is in one of ``from_states`` (a guarded UPDATE whose
    row count is checked) and record the transition. Returns False, changing nothing, if the job had
    already moved on. ``extra`` sets further fields; ``where`` adds further guards. A job that ends keeps
    no waiting reason (nothing is left to wait for)."""
    extra = transition_fields(to_state, extra)
    current = Job.objects.filter(pk=job_id, state__in=from_states, **(where or {})).values_list(
        "state", flat=True
    ).first()
    if current is None:
        return False
    updated = Job.objects.filter(pk=job_id, state=current, **(where or {})).update(state=to_state, **(extra or {}))
    if updated != 1:
        return False
    transition = JobTransition.objects.create(
        job_id=job_id, from_state=current, to_state=to_state, at=at, cause=cause[:300], actor=actor,
        details=details or {},
    )
    jobs_transitioned.send(sender=JobTransition, transitions=[transition])
    return True


def transition_fields(to_state: str, extra: dict | None) -> dict:
    """The fields a move to ``to_state`` sets besides the state: ``extra``, and, for an end, the waiting reasons
    cleared (nothing is left to wait for)."""
    if to_state in FINAL_STATES:
        return {"pending_reason_code": "", "pending_reason_message": "", "pending_reason_details": {},
                "queue_position": None, "estimated_start": None, **(extra or {})}
    return extra or {}


def jobs_transition_locked(job_ids: list[int], *, from_state: str, to_state: str, cause: str,
                           at: datetime) -> list[int]:
    """``job_transition`` for many jobs at once, in two statements: those of ``job_ids`` still in ``from_state``
    move to ``to_state`` (the caller holds their rows locked, as a heartbeat does its node's jobs) and each move
    is recorded. Returns the ids moved. Not for an end (``job_transition`` clears an ending job's reasons)."""
    if to_state in FINAL_STATES:
        raise ValueError(f"{to_state} is an end: use job_transition")
    if not job_ids:
        return []
    marks = ", ".join(["%s"] * len(job_ids))
    with connection.cursor() as cursor:  # one UPDATE that says which rows it moved
        cursor.execute(f'UPDATE "{Job._meta.db_table}" SET "state" = %s WHERE "id" IN ({marks}) AND "state" = %s '
                       'RETURNING "id"', [to_state, *job_ids, from_state])
        moved = sorted(row[0] for row in cursor.fetchall())
    transitions = JobTransition.objects.bulk_create(
        JobTransition(job_id=job_id, from_state=from_state, to_state=to_state, at=at, cause=cause[:300], details={})
        for job_id in moved)
    if transitions:
        jobs_transitioned.send(sender=JobTransition, transitions=transitions)
    return moved
