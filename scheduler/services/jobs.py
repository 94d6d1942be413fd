"""Job services: submit, cancel, hold, release. Views, the API and the CLI call these and nothing else. What a
request may be (its checks, limits and defaults) is ``scheduler.services.job_requests``; its limits are named
here too, where the serializers and forms have always found them."""

from django.core.exceptions import ValidationError
from django.db import connections, router, transaction
from django.db.models.sql import InsertQuery

from portal.access import can_manage_job, is_platform_admin
from scheduler import wake
from scheduler.models import Job, JobTransition
from scheduler.models.jobs import HOLDING_STATES, JobState, StopReason
from scheduler.services.common import db_now, job_transition
from scheduler.services.dependencies import dependencies_save
from scheduler.services.job_requests import (  # noqa: F401 - the limits, where callers have always found them
    DEFAULT_RETRY_BACKOFF_S,
    FRACTION_ERRORS,
    MAX_COMMAND,
    MAX_CPUS,
    MAX_ENV_VALUE,
    MAX_GPU_MEMORY_GB,
    MAX_GPUS,
    MAX_IMAGE,
    MAX_LABEL,
    MAX_MEMORY_GB,
    MAX_NAME,
    MAX_NODES,
    MAX_TIME_LIMIT_MINUTES,
    job_request_checked,
    priority_class_refusal,
    waiting_for_cycle,
)


def job_submit(*, user, **request) -> Job:
    """Validate a request (see ``job_request_checked``) and queue it as a pending job of its team; nothing
    is saved when a field is bad. The scheduling cycle is woken when the transaction commits (at once when the
    caller holds none: the job's one statement has committed)."""
    job, deps = job_request_checked(user=user, **request)
    cause = (f"submitted at priority class {job.priority_class.name}: {job.lowered_by_budget}"[:300]
             if job.lowered_by_budget else "submitted")
    if deps:
        with transaction.atomic():
            job_insert(job, cause=cause, actor=user)
            dependencies_save([job], deps)
    else:  # one statement: atomic without a transaction of its own (no BEGIN, no COMMIT)
        job_insert(job, cause=cause, actor=user)
    wake_cycle()
    return job


def job_insert(job: Job, *, cause: str, actor) -> None:
    """Save the new ``job`` and its first transition (to pending, stamped by the database's clock: the statement's
    time) in one statement, one round trip: the job's INSERT as Django writes it (every field's defaults and
    conversions), its transition's INSERT beside it in the same statement."""
    using = router.db_for_write(Job)
    query = InsertQuery(Job)
    query.insert_values([f for f in Job._meta.local_concrete_fields if f is not Job._meta.pk], [job])
    [(insert, params)] = query.get_compiler(using=using).as_sql()
    transition = JobTransition._meta.db_table
    with connections[using].cursor() as cursor:
        cursor.execute(f"WITH job AS ({insert} RETURNING id) "
                       f"INSERT INTO {transition} (job_id, from_state, to_state, at, cause, actor_id, details) "
                       "SELECT id, '', %s, STATEMENT_TIMESTAMP(), %s, %s, '{}' FROM job RETURNING job_id",
                       [*params, JobState.PENDING, cause, actor.pk])
        job.pk = cursor.fetchone()[0]
    job._state.adding, job._state.db = False, using


def wake_cycle() -> None:
    """Ask for a scheduling cycle once the current transaction commits (a hint: beat runs it anyway)."""
    from scheduler.tasks import run_cycle

    run_cycle.delay_on_commit()


class NotAllowed(Exception):
    """The user may see the job but not act on it."""


def job_cancel(*, user, job: Job) -> Job:
    """Cancel ``job``: a waiting job ends at once; a holding job is asked to stop and ends when its node
    confirms the processes are gone (its GPUs are freed then). Idempotent for finished jobs."""
    if not can_manage_job(user, job):
        raise NotAllowed("only the submitter, a team-admin or a platform admin may cancel this job")
    with transaction.atomic():
        cancel_one(job.pk, user=user, now=db_now())
    job.refresh_from_db()
    return job


def cancel_one(job_id: int, *, user, now, cause: str = "") -> bool:
    """Cancel job ``job_id`` for ``user`` (who may manage it; ``cause`` says why, else "cancelled by <user>"):
    end it if it waits, else ask its processes to stop. False when it had already ended or was asked to stop."""
    if job_transition(
        job_id, from_states=(JobState.PENDING, JobState.HELD), to_state=JobState.CANCELLED,
        cause=cause or f"cancelled by {user}", at=now, actor=user,
        extra={"finished_at": now, "queue_position": None, "estimated_start": None},
    ):
        wake_cycle()
        return True
    if Job.objects.filter(pk=job_id, state__in=HOLDING_STATES).exclude(stop_reason=StopReason.CANCEL).update(
            stop_reason=StopReason.CANCEL):
        wake.holders_notify([job_id])  # its node stops it now, not at its next heartbeat
        return True
    return False


def job_hold(*, user, job: Job, why: str = "", admin: bool = False) -> Job:
    """Hold a pending job: the scheduler skips it until it is released (``why``: shown to the team).
    ``admin``: a platform admin's hold from the admin queue, which only a platform admin may release."""
    if not can_manage_job(user, job) or (admin and not is_platform_admin(user)):
        raise NotAllowed("only the submitter, a team-admin or a platform admin may hold this job")
    by = f"by {user}: {why}" if why else f"by {user}"
    with transaction.atomic():
        if not job_transition(
            job.pk, from_states=(JobState.PENDING,), to_state=JobState.HELD, cause=f"held {by}",
            at=db_now(), actor=user, details={"admin_hold": True} if admin else None,
            # the team reads "Held by …"; the cycle keeps this message while the job stays held
            # a held job stands nowhere in the queue: no position, no estimated start (not even until the cycle)
            extra={"pending_reason_code": "Held", "pending_reason_message": by[:500], "queue_position": None,
                   "estimated_start": None},
        ):
            raise ValidationError({"state": f"only a pending job can be held; this one is {job.state}"})
    job.refresh_from_db()
    return job


def held_by_admin(job: Job) -> bool:
    """Whether ``job`` is held by a platform admin's hold from the admin queue (see ``job_hold``)."""
    if job.state != JobState.HELD:
        return False
    details = job.transitions.filter(to_state=JobState.HELD).order_by("-id").values_list("details", flat=True).first()
    return bool(details and details.get("admin_hold"))


def can_release(user, job: Job) -> bool:
    """Whether ``user`` may release ``job``: who may manage it, unless a platform admin held it (then only a
    platform admin)."""
    return can_manage_job(user, job) and (is_platform_admin(user) or not held_by_admin(job))


def job_release(*, user, job: Job, why: str = "") -> Job:
    """Release a held job back to the queue (``why``: shown to the team)."""
    if not can_manage_job(user, job):
        raise NotAllowed("only the submitter, a team-admin or a platform admin may release this job")
    if not can_release(user, job):
        raise NotAllowed("a platform admin held this job (its reason says why); only a platform admin may "
                         "release it")
    with transaction.atomic():
        if not job_transition(
            job.pk, from_states=(JobState.HELD,), to_state=JobState.PENDING,
            cause=f"released by {user}: {why}" if why else f"released by {user}",
            at=db_now(), actor=user, extra=waiting_for_cycle(),
        ):
            raise ValidationError({"state": f"only a held job can be released; this one is {job.state}"})
        wake_cycle()
    job.refresh_from_db()
    return job


# The request of a job as ``job_request_build`` takes it (a resubmit copies these).
REQUEST_FIELDS = ("name", "command", "kind", "gpus", "gpu_fraction", "gpu_memory_gb", "cpus", "memory_gb", "nodes",
                  "node_labels", "min_driver_version", "time_limit_minutes", "preemptible", "env", "image",
                  "idle_timeout_minutes")


def job_resubmit(*, user, job: Job, changes: dict) -> Job:
    """Replace the waiting ``job`` by a copy with ``changes`` (from its "what would make it start":
    ``gpus``, ``gpu_model``, ``pool``, ``time_limit_minutes``): the copy is submitted and the job cancelled
    in one transaction, or nothing happens (a bad change names its field; a job that started meanwhile is
    refused)."""
    from scheduler.services.explain import RESUBMIT_FIELDS

    if not can_manage_job(user, job):
        raise NotAllowed("only the submitter, a team-admin or a platform admin may resubmit this job")
    if not isinstance(changes, dict) or not changes:
        raise ValidationError({"changes": f"name at least one of {', '.join(RESUBMIT_FIELDS)}"})
    unknown = sorted(set(changes) - set(RESUBMIT_FIELDS))
    if unknown:
        raise ValidationError({k: f"cannot be changed by a resubmit; allowed: {', '.join(RESUBMIT_FIELDS)}"
                               for k in unknown})
    request = {f: getattr(job, f) for f in REQUEST_FIELDS}
    request |= {"team": job.team, "gpu_model": job.gpu_model.name if job.gpu_model else None,
                "pool": job.pool.name if job.pool else None, "priority_class": job.priority_class.name}
    request |= changes
    with transaction.atomic():
        new = job_submit(user=user, **request)
        described = ", ".join(f"{k}={v}" for k, v in sorted(changes.items()))
        if not job_transition(
            job.pk, from_states=(JobState.PENDING, JobState.HELD), to_state=JobState.CANCELLED,
            cause=f"resubmitted by {user} as #{new.pk} with {described}"[:300], at=db_now(), actor=user,
            extra={"finished_at": db_now(), "queue_position": None, "estimated_start": None},
        ):
            raise ValidationError({"state": f"only a waiting job can be resubmitted; this one is "
                                            f"{Job.objects.get(pk=job.pk).state}"})
    return new
