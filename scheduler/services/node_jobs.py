"""What a node reports about its jobs (events, logs), judged against the attempts it holds, and how an attempt
ends on a node: its allocations there close and, once none remain open, the job settles (succeeded, failed,
requeued, restarted...). Also liveness: a node silent too long is marked down and its attempts end.

A node speaks only for itself: every function takes the authenticated Node and touches only the allocations
on it. GPUs are released only when the node confirms the job's processes are gone (or it is lost).
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, Exists, ExpressionWrapper, F, Value
from django.db.models.functions import Coalesce

from scheduler.models import Allocation, Job, JobLog, Node, SchedulerBeat
from scheduler.models.jobs import HOLDING_STATES, FailureReason, JobState, StopReason
from scheduler.retries import FAILED, NODE_LOST, START_FAILED, TIMED_OUT
from scheduler.services.common import db_clock, db_now, job_transition
from scheduler.services.lost_work import preemption_complete
from scheduler.services.nodes import NodeProtocolError
from scheduler.services.replica_health import restart_cause
from scheduler.services.retries import job_retry

RESTART_KINDS = ("inference",)
RESTART_BACKOFF_S = 10
MAX_RESTART_BACKOFF_S = 300
STABLE_RUN_S = 600  # a service up this long had recovered: its next failure backs off from the start again
# How long after its allocation closed a node may still report about an attempt (its last log lines, its end
# event, a resend of an event whose answer was lost): after the node was marked down the agent sends them
# once the processes are gone, after its heartbeat timeout, the grace period and a few log passes, or as
# long as the outage lasted. Later reports are refused.
LATE_REPORT_WINDOW = timedelta(hours=1)
# A requeued job starts a fresh attempt: what a node said ended the last one (a gang member's OOMKilled) goes.
NO_FAILURE = {"failure_reason": "", "failure_message": ""}


def _reported_attempt(node: Node, job_id: int, attempt: int, *, now=None, lock: bool = False) -> tuple[Job, bool]:
    """The job a node reports about, and whether the node still holds the reported attempt (``_judged``). The
    job carries ``clock``, the database's clock (``db_now``) read with it: the time of the report unless ``now``
    is given. With ``lock`` the job row is locked. The usual report, about the current attempt while the node
    holds it, costs this one query (the clock and the open allocation are read with the job)."""
    on_node = Allocation.objects.filter(job_id=job_id, node=node)
    job = ((Job.objects.select_for_update() if lock else Job.objects)
           .annotate(clock=db_clock(),
                     holds_open=Exists(on_node.filter(attempt=attempt, ended_at__isnull=True)))
           .filter(Exists(on_node), pk=job_id).first())  # fmt: skip
    if job is None:
        raise _unknown(job_id)
    if job.holds_open and attempt == job.attempt:
        return job, True
    held = list(Allocation.objects.filter(job=job, node=node, attempt__in={attempt, job.attempt})
                .values_list("attempt", "ended_at"))
    return job, _judged(job, attempt, held, now or job.clock)


def _judged(job: Job, attempt: int, held: list[tuple[int, datetime | None]], now: datetime) -> bool:
    """Whether the node that held ``held`` (its allocations of ``job``: (attempt, ended_at) pairs; those of
    ``attempt`` and of the job's current attempt at least) still holds the reported ``attempt``; raises the
    NodeProtocolError a report it may not make is answered.

    A node speaks only for an attempt it holds (an open allocation here) or held until moments ago: the
    agent sends an attempt's last log lines, then its end event, once its processes are gone, which can be
    after the portal closed the allocation (the node was marked down and the job requeued), and it resends
    an event whose answer it lost. So for ``LATE_REPORT_WINDOW`` after its allocation here closed the node
    may still report about that attempt. Reports about an attempt the node never held get the 404 of an
    unknown job; the rest are 409 (field ``attempt``)."""
    ends = [ended for held_attempt, ended in held if held_attempt == attempt]
    holds_current = any(held_attempt == job.attempt and ended is None for held_attempt, ended in held)
    if any(ended is None for ended in ends):
        if attempt != job.attempt:
            raise _not_current(job, attempt)
        return True
    if not ends:
        raise _not_current(job, attempt) if holds_current else _unknown(job.pk)
    if now - max(ends) > LATE_REPORT_WINDOW:
        raise _attempt_over(job.pk, attempt)
    return False


def _unknown(job_id: int) -> NodeProtocolError:
    return NodeProtocolError(f"job {job_id} has no allocation on this node", status=404, field="job_id")


def _not_current(job: Job, attempt: int) -> NodeProtocolError:
    return NodeProtocolError(f"attempt {attempt} is not the job's current attempt ({job.attempt})", status=409,
                             field="attempt")


def _attempt_over(job_id: int, attempt: int) -> NodeProtocolError:
    return NodeProtocolError(f"attempt {attempt} of job {job_id} is over", status=409, field="attempt")


def node_job_event(*, node: Node, job_id: int, event: dict, wake: bool = True) -> Job:
    """A node reports that a job's processes started, exited or could not start on it: a batch of one
    (``scheduler.services.node_event_batch``, where each event is judged and applied). Raises NodeProtocolError
    for a refused one. An end wakes the cycle unless ``wake``."""
    from scheduler.services.node_event_batch import node_events_apply

    batch = node_events_apply(node=node, events=[{**event, "job_id": job_id}], wake=wake)
    if isinstance(batch.results[0], NodeProtocolError):
        raise batch.results[0]
    return batch.jobs[job_id]


def _start_fields(event: dict, now: datetime) -> dict:
    """What a ``started`` event sets on a job that moves to ``running``."""
    return {"started_at": now, "service_address": event.get("address", ""),
            "service_health": event.get("health", ""), "service_health_message": ""}


def _end_fields(job: Job, event: dict) -> dict:
    """What an end event sets on the job with its GPU time: its exit code and the cause the node named, each
    kept from the first member of a gang to end (and each only when given)."""
    exit_code = event.get("exit_code")
    if event["type"] == "start_failed":
        exit_code = exit_code if exit_code is not None else -1
    fields = {"exit_code": exit_code} if job.exit_code is None and exit_code is not None else {}
    if event.get("reason") and not job.failure_reason:
        fields.update(failure_reason=event["reason"], failure_message=(event.get("message") or "")[:500])
    return fields


def _gpu_seconds(closed: list[Allocation], now: datetime) -> float:
    """The GPU time of allocations closed at ``now``: what the job received (accounting bills the same
    intervals)."""
    return sum((now - a.started_at).total_seconds() * a.share for a in closed)


def _attempt_ended_here(job: Job, event: dict, now: datetime, *, elsewhere: bool, transition=job_transition) -> bool:
    """This node's allocations of ``job``'s attempt are closed: settle the job (its move written by
    ``transition``, see ``_settle``), or, while the attempt still holds devices on another node (a gang member
    that has not ended), ask those members to stop (returns True when it did: their nodes are to be told)."""
    if not elsewhere:
        _settle(job, event, now, transition)
        return False
    if job.stop_reason:
        return False
    return bool(Job.objects.filter(pk=job.pk, stop_reason=StopReason.NONE).update(stop_reason=StopReason.GANG_EXIT))


def _close_on_node(job: Job, node: Node, now, **fields) -> tuple[bool, bool]:
    """End the open allocations of ``job``'s attempt on ``node``, adding their GPU time to what the job has
    received (and setting ``fields``), on the row and on ``job``, whose row the caller holds locked (so
    ``job`` is what the row holds without reading it again). Returns whether there were any here, and
    whether the attempt still holds devices on another node (a gang member that has not ended)."""
    held = list(Allocation.objects.filter(job=job, attempt=job.attempt, ended_at__isnull=True))
    closed = [alloc for alloc in held if alloc.node_id == node.pk]
    elsewhere = len(closed) < len(held)
    if not closed:
        return False, elsewhere
    Allocation.objects.filter(pk__in=[a.pk for a in closed]).update(ended_at=now)
    gpu_seconds = _gpu_seconds(closed, now)
    Job.objects.filter(pk=job.pk).update(attained_gpu_seconds=F("attained_gpu_seconds") + gpu_seconds, **fields)
    job.attained_gpu_seconds += gpu_seconds
    for name, value in fields.items():
        setattr(job, name, value)
    return True, elsewhere


def _settle(job: Job, event: dict, now, transition=job_transition) -> None:
    """Settle ``job``, whose attempt has ended (every allocation closed), by the lifecycle's rules: its move is
    written by ``transition`` (``job_transition``'s arguments; the caller holds the row locked in a holding
    state, so the move is certain and a batch of events may write its moves together), a retry by
    ``job_retry``."""
    message = event.get("message") or ""
    code = job.exit_code
    reason = job.stop_reason
    common = {"finished_at": now, "stop_reason": StopReason.NONE}
    # What a node named as the cause (FailureReason): this report's, or the first gang member's to end.
    failure = job.failure_reason
    failure_message = job.failure_message or message
    failed_because = {"failure_reason": failure, "failure_message": failure_message[:500]} if failure else {}
    agent_stopped = event["type"] == "stopped" and not reason and "time limit" not in message
    if reason == StopReason.NODE_UNHEALTHY or agent_stopped:  # the platform lost the attempt
        cause = ("node unhealthy" if reason == StopReason.NODE_UNHEALTHY
                 else f"stopped by the node agent ({message or 'no reason given'})")
        if not job_retry(job, NODE_LOST, cause=cause, now=now, exit_code=code):
            _end_node_lost(job, cause, now, code, transition)
    elif reason == StopReason.PREEMPT:
        cause = "preempted: requeued"
        preemption_complete(job, now)  # the work lost since the last checkpoint, credited back to the team
        transition(
            job.pk, from_states=HOLDING_STATES, to_state=JobState.PENDING,
            cause=cause[:300],
            at=now, details={"attempt": job.attempt, "exit_code": code},
            extra={**NO_FAILURE, "attempt": job.attempt + 1, "stop_reason": StopReason.NONE, "admitted_at": None,
                   "started_at": None, "exit_code": None, "pending_reason_code": "Requeued",
                   "pending_reason_message": cause[:500]},
        )
    elif failure == FailureReason.OOM_KILLED and reason in (StopReason.NONE, StopReason.GANG_EXIT):
        # a resource failure, not retried into the same limit (a gang's other members were stopped for it)
        transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.FAILED,
                       cause=f"OOMKilled: {failure_message or 'the job exceeded its memory limit'}"[:300], at=now,
                       details={"exit_code": code, "signal": event.get("signal"), "reason": failure},
                       extra={**common, **failed_because, "failure_class": "resource"})
    elif job.kind in RESTART_KINDS and not reason and (code not in (0, None) or event.get("signal")
                                                        or failure == FailureReason.UNHEALTHY):
        # Failures in a row back off longer each time; a run that stayed up STABLE_RUN_S starts the count over.
        stable = job.started_at is not None and (now - job.started_at).total_seconds() >= STABLE_RUN_S
        restarts = 0 if stable else job.restarts
        delay = min(MAX_RESTART_BACKOFF_S, RESTART_BACKOFF_S * 2 ** restarts)
        transition(
            job.pk, from_states=HOLDING_STATES, to_state=JobState.PENDING,
            cause=f"{restart_cause(failure, failure_message, code, event.get('signal'))}: restarting in {delay} s",
            at=now, details={"attempt": job.attempt, "exit_code": code, "backoff_s": delay},
            extra={**NO_FAILURE, "attempt": job.attempt + 1, "restarts": restarts + 1, "admitted_at": None,
                   "started_at": None, "exit_code": None, "not_before": now + timedelta(seconds=delay),
                   "pending_reason_code": "Backoff",
                   "pending_reason_message": f"restarting after a failure; not before {delay} s from the failure"},
        )
    elif reason == StopReason.IDLE:
        transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.CANCELLED,
                       cause=f"reclaimed: GPUs idle for {job.idle_timeout_minutes} min", at=now,
                       details={"exit_code": code}, extra=common)
    elif reason == StopReason.CANCEL:
        transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.CANCELLED,
                       cause="cancelled: processes stopped",
                       at=now, details={"exit_code": code}, extra=common)
    elif reason == StopReason.TIMEOUT or "time limit" in message:
        if not job_retry(job, TIMED_OUT, cause="time limit reached", now=now, exit_code=code):
            transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.TIMED_OUT,
                           cause="time limit reached", at=now, details={"exit_code": code}, extra=common)
    elif event["type"] == "start_failed":
        pull = failure == FailureReason.IMAGE_PULL_FAILED  # a wrong or missing image: the submitter's to fix
        cause = f"could not start: {f'{failure}: ' if failure else ''}{failure_message}"
        if pull or not job_retry(job, START_FAILED, cause=cause, now=now, exit_code=code):
            transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.FAILED, cause=cause[:300], at=now,
                           details={"exit_code": code, **({"reason": failure} if failure else {})},
                           extra={**common, **failed_because, "failure_class": "user" if pull else "platform"})
    elif code == 0:
        transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.SUCCEEDED, cause="exited with code 0",
                       at=now, details={"exit_code": 0}, extra=common)
    else:
        sig = event.get("signal")
        cause = f"killed by signal {sig}" if sig else f"exited with code {code}"
        if not job_retry(job, FAILED, cause=cause, now=now, exit_code=code):
            transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.FAILED, cause=cause, at=now,
                           details={"exit_code": code, "signal": sig},
                           extra={**common, "failure_class": "resource" if sig == 9 else "user"})


def _end_node_lost(job: Job, cause: str, now, code: int | None = None, transition=job_transition) -> None:
    """End ``job`` as ``node-lost``: the platform lost its attempt and its retries are spent."""
    transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.NODE_LOST,
                   cause=f"{cause}: no retries left ({job.retries} used)"[:300], at=now,
                   details={"attempt": job.attempt, "exit_code": code},
                   extra={"finished_at": now, "stop_reason": StopReason.NONE, "failure_class": "platform"})


def node_job_log(*, node: Node, job_id: int, attempt: int, offset: int, data: str) -> int:
    """Append a chunk of an attempt's output; chunks already stored are ignored. Returns the stored size.
    Only the node that runs the attempt may send it, or, shortly after, the node that ran it (see
    ``_reported_attempt``), unless the job finished with that attempt."""
    chunk = data.encode()
    with transaction.atomic():
        job, holds = _reported_attempt(node, job_id, attempt)
        if not holds and attempt == job.attempt and job.state not in HOLDING_STATES:
            raise _attempt_over(job_id, attempt)  # it finished on an end event, which comes after the log
        entry, _ = JobLog.objects.select_for_update().get_or_create(job_id=job_id, attempt=attempt)
        if offset > entry.size:
            raise NodeProtocolError(f"offset {offset} is past the stored size {entry.size}", status=409,
                                    field="offset")
        new = chunk[entry.size - offset:]
        if not new:
            return entry.size
        if len(entry.content.encode()) + len(new) > settings.JOB_LOG_MAX_BYTES:
            entry.truncated = True
        else:
            entry.content += new.decode(errors="replace")
        entry.size += len(new)
        entry.save(update_fields=["content", "size", "truncated"])
        return entry.size


def nodes_check_liveness() -> list[str]:
    """Mark nodes silent for longer than the heartbeat timeout they were told (by the database clock; see
    ``node_cadence``) ``down`` and settle their jobs' attempts there (see ``_lose_node``). Returns the names of
    the nodes marked down."""
    marked = []
    with transaction.atomic():
        now = db_now()
        timeout = Coalesce("heartbeat_timeout_s", Value(settings.ROTA_NODE_HEARTBEAT_TIMEOUT_S))
        due = ExpressionWrapper(F("last_heartbeat_at") + timeout * Value(timedelta(seconds=1)),
                                output_field=DateTimeField())
        silent = list(
            Node.objects.select_for_update(skip_locked=True).exclude(state=Node.DOWN).alias(due=due).filter(due__lt=now)
        )
        for node in silent:
            told = node.heartbeat_timeout_s or settings.ROTA_NODE_HEARTBEAT_TIMEOUT_S
            every = f" (told to heartbeat every {node.heartbeat_interval_s}s)" if node.heartbeat_interval_s else ""
            Node.objects.filter(pk=node.pk).update(
                state=Node.DOWN, state_reason=f"no heartbeat for {told}s{every}",
                state_changed_at=now, state_changed_by=None,
            )
            for alloc_job in Job.objects.filter(  # locked in id order below, as every writer of jobs does
                allocations__node=node, allocations__ended_at__isnull=True, state__in=HOLDING_STATES
            ).distinct().order_by("pk"):
                _lose_node(alloc_job, node, now)
            marked.append(node.name)
        SchedulerBeat.record(SchedulerBeat.LIVENESS, now)
    return marked


def _lose_node(job: Job, node: Node, now) -> None:
    """``node`` went silent while ``job`` held devices there. Its allocations there end (the node is down:
    nothing is placed on it until it registers again, and its agent then stops what it still runs). A gang
    member on other nodes keeps its devices until those nodes confirm its processes are gone, as any stop:
    the job is asked to stop (keeping a stop already asked for), and settles on their reports. Otherwise
    the job settles now: a cancel, time limit or idle reclaim asked for before ends it as asked; anything
    else is requeued."""
    job = Job.objects.select_for_update().get(pk=job.pk)  # a node's report about it waits, then sees this
    if job.state not in HOLDING_STATES:
        return
    _closed, elsewhere = _close_on_node(job, node, now)
    if elsewhere:
        Job.objects.filter(pk=job.pk, stop_reason=StopReason.NONE).update(stop_reason=StopReason.NODE_UNHEALTHY)
        return
    if job.stop_reason in (StopReason.CANCEL, StopReason.TIMEOUT, StopReason.IDLE):
        _settle(job, {"type": "stopped", "message": f"node {node.name} lost"}, now)
        return
    cause = f"node {node.name} stopped answering"
    if not job_retry(job, NODE_LOST, cause=cause, now=now):
        _end_node_lost(job, cause, now)
