"""Retrying an attempt that ended badly (the rule: ``scheduler.retries``): queue the job again as a new
attempt, or say it is not retried."""

from datetime import timedelta

from django.conf import settings

from scheduler.models import Job
from scheduler.models.jobs import HOLDING_STATES, JobState, StopReason
from scheduler.retries import RetryPolicy, retry_delay
from scheduler.services.common import job_transition


def retry_policy(job: Job) -> RetryPolicy:
    return RetryPolicy(max_retries=job.max_retries, retry_on=tuple(job.retry_on or ()),
                       backoff_s=job.retry_backoff_s, platform_retries=settings.ROTA_PLATFORM_RETRIES)


def job_retry(job: Job, kind: str, *, cause: str, now, exit_code: int | None = None) -> bool:
    """Queue ``job`` (holding, its attempt just ended as ``kind`` for ``cause``) again as a new attempt if its
    policy retries that kind, not before its backoff; False, changing nothing, when it is not retried."""
    policy = retry_policy(job)
    delay = retry_delay(policy, kind, job.retries)
    if delay is None:
        return False
    n = job.retries + 1
    limit = policy.max_retries if kind in policy.retry_on else policy.platform_retries
    when = f"in {delay} s" if delay else "at once"
    message = f"{cause}: retry {n} of {limit} {when}"
    return job_transition(
        job.pk, from_states=HOLDING_STATES, to_state=JobState.PENDING, cause=message, at=now,
        details={"attempt": job.attempt, "exit_code": exit_code, "retry": n, "kind": kind, "backoff_s": delay},
        extra={"attempt": job.attempt + 1, "retries": n, "stop_reason": StopReason.NONE, "admitted_at": None,
               "failure_reason": "", "failure_message": "",  # a new attempt starts with no failure named
               "started_at": None, "exit_code": None, "not_before": now + timedelta(seconds=delay) if delay else None,
               "pending_reason_code": "Backoff" if delay else "Requeued", "pending_reason_message": message[:500],
               "pending_reason_details": {"retry": n, "of": limit, "kind": kind, "backoff_s": delay}},
    )
