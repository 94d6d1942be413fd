"""Retries: whether an attempt that ended badly is queued again, and after how long. Pure (no Django).

Kinds of bad end (``RETRY_KINDS``), as ``Job.retry_on`` names them:

* ``node-lost``: the platform lost the attempt (its node stopped answering, a GPU failed under it, the
  node agent stopped it). Retried without being asked, up to the platform's limit
  (``ROTA_PLATFORM_RETRIES``), the first at once: the job goes elsewhere and nothing was its fault. A job
  that lists ``node-lost`` itself uses its own ``max_retries`` and backoff instead. Past the limit the job
  ends ``node-lost``.
* ``failed``: the command exited non-zero or was killed by a signal (a user or resource failure);
* ``start-failed``: the node could not start it (image pull, runtime);
* ``timed-out``: it reached its time limit.
  These three are retried only when the job asks (``retry_on``), up to its ``max_retries``.

Preemption is not a failure: a preempted job is always requeued (``scheduler.services.node_jobs``).
Every retry is a new attempt (its own allocations, log and accounting); the job's transitions say why each
attempt ended.
"""

from dataclasses import dataclass

NODE_LOST, FAILED, START_FAILED, TIMED_OUT = "node-lost", "failed", "start-failed", "timed-out"
RETRY_KINDS = (NODE_LOST, FAILED, START_FAILED, TIMED_OUT)
MAX_RETRIES = 10
MAX_BACKOFF_S = 3600


@dataclass(frozen=True)
class RetryPolicy:
    """A job's own retry settings and the platform's limit for lost nodes."""

    max_retries: int
    retry_on: tuple[str, ...]
    backoff_s: int
    platform_retries: int


def retry_delay(policy: RetryPolicy, kind: str, retries: int) -> int | None:
    """Seconds to wait before retrying an attempt that ended as ``kind`` after ``retries`` retries so far,
    or None when it is not retried (then the job ends)."""
    if kind in policy.retry_on:
        if retries >= policy.max_retries:
            return None
        return min(MAX_BACKOFF_S, policy.backoff_s * 2 ** retries)
    if kind != NODE_LOST or retries >= policy.platform_retries:
        return None
    return 0 if retries == 0 else min(MAX_BACKOFF_S, policy.backoff_s * 2 ** (retries - 1))
