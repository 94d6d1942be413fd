"""Node services: what the node API does on register, heartbeat, job events and logs; liveness; drain.

A node speaks only for itself: every function takes the authenticated Node and touches only its GPUs and
the allocations on it. GPUs are released only when the node confirms the job's processes are gone.
"""

import logging
import re
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F

from scheduler.models import Allocation, Gpu, GpuModel, Job, JobLog, Node
from scheduler.models.jobs import HOLDING_STATES, JobState, StopReason
from scheduler.services.common import db_now, job_transition
from scheduler.services.telemetry import TelemetryError, health_update, telemetry_ingest

log = logging.getLogger(__name__)


RESTART_KINDS = ("inference",)
RESTART_BACKOFF_S = 10
MAX_RESTART_BACKOFF_S = 300


class NodeProtocolError(Exception):
    """A report the portal refuses; ``status`` is the HTTP status, ``field`` the offending field."""

    def __init__(self, message: str, *, status: int = 400, field: str | None = None):
        super().__init__(message)
        self.status = status
        self.field = field


_SLUG = re.compile(r"[^a-z0-9.]+")


def _model_for(model_name: str, memory_mb: int) -> GpuModel:
    slug = _SLUG.sub("-", model_name.lower()).strip("-")[:63] or "unknown"
    model, _ = GpuModel.objects.get_or_create(
        name=slug, defaults={"memory_mb": memory_mb, "display_name": model_name, "is_mig_profile": "g." in slug}
    )
    return model


def node_register(*, node: Node, report: dict) -> dict:
    """Record what the agent found on its host. GPUs are matched by index; a GPU that disappeared is
    marked absent and the node drained with a reason. A node that was down becomes ready."""
    gpus_in = report["gpus"]
    with transaction.atomic():
        now = db_now()
        node = Node.objects.select_for_update().get(pk=node.pk)
        known = {g.index: g for g in node.gpus.all()}
        seen = set()
        for item in gpus_in:
            seen.add(item["index"])
            model = _model_for(item["model"], item["memory_mb"])
            gpu = known.get(item["index"])
            if gpu is None:
                Gpu.objects.create(node=node, index=item["index"], uuid=item["uuid"], model=model,
                                   memory_mb=item["memory_mb"])
            else:
                gpu.uuid, gpu.model, gpu.memory_mb, gpu.present = item["uuid"], model, item["memory_mb"], True
                gpu.save(update_fields=["uuid", "model", "memory_mb", "present"])
        missing = sorted(set(known) - seen)
        if missing:
            node.gpus.filter(index__in=missing).update(present=False)
        fields = {
            "driver_version": report.get("driver_version", ""), "cuda_version": report.get("cuda_version", ""),
            "cpus": report.get("cpus", 0), "memory_mb": report.get("memory_mb", 0),
            "gpu_backend": report.get("gpu_backend", ""), "agent_version": report.get("agent_version", ""),
            "registered_at": now, "last_heartbeat_at": now, "heartbeat_seq": 0,
        }
        if missing and node.state in (Node.READY, Node.DOWN):
            fields.update(state=Node.DRAINING, state_reason=f"returned with fewer GPUs (missing index {missing})",
                          state_changed_at=now, state_changed_by=None)
        elif node.state == Node.DOWN:
            fields.update(state=Node.READY, state_reason="agent registered", state_changed_at=now,
                          state_changed_by=None)
        Node.objects.filter(pk=node.pk).update(**fields)
    return {
        "node": node.name,
        "heartbeat_interval_s": settings.ROTA_NODE_HEARTBEAT_INTERVAL_S,
        "heartbeat_timeout_s": settings.ROTA_NODE_HEARTBEAT_TIMEOUT_S,
    }


def node_assignments(node: Node) -> list[dict]:
    """What should run on ``node`` now: every holding job with an open allocation here."""
    allocs = (
        Allocation.objects.filter(node=node, ended_at__isnull=True, job__state__in=HOLDING_STATES)
        .select_related("job", "job__priority_class", "gpu")
        .order_by("job_id", "gpu__index")
    )
    by_job: dict[int, dict] = {}
    for alloc in allocs:
        job = alloc.job
        if alloc.attempt != job.attempt:
            continue
        entry = by_job.get(job.pk)
        if entry is None:
            entry = by_job[job.pk] = {
                "job_id": job.pk, "attempt": job.attempt,
                "desired": "stopped" if job.stop_reason else "running",
                "command": job.command,
                "env": {**(job.env or {}), "ROTA_JOB_ID": str(job.pk), "ROTA_JOB_NAME": job.name,
                        "ROTA_KIND": job.kind,
                        **({"ROTA_PORT": str(job.service_port)} if job.service_port else {})},
                "port": job.service_port,
                "gpus": [], "time_limit_s": job.time_limit_minutes * 60 if job.time_limit_minutes else None,
                "grace_period_s": job.priority_class.grace_period_s, "kind": job.kind,
                "stop_reason": job.stop_reason,
            }
        entry["gpus"].append({"index": alloc.gpu.index, "uuid": alloc.gpu.uuid, "share": alloc.share})
    # Members of a multi-node gang learn their peers: node names in a stable order and their own rank.
    peers: dict[int, list[str]] = {}
    for job_id, name in (
        Allocation.objects.filter(job_id__in=by_job, ended_at__isnull=True).values_list("job_id", "node__name")
        .distinct().order_by("job_id", "node__name")
    ):
        peers.setdefault(job_id, []).append(name)
    for job_id, entry in by_job.items():
        names = peers.get(job_id, [node.name])
        entry["env"].update(ROTA_NODES=",".join(names), ROTA_NODE_RANK=str(names.index(node.name)),
                            ROTA_NUM_NODES=str(len(names)), ROTA_MASTER_ADDR=names[0])
    return list(by_job.values())


def node_heartbeat(*, node: Node, report: dict) -> dict:
    """Accept a heartbeat (strictly increasing ``seq``), record GPU health, return the assignments."""
    seq = report["seq"]
    with transaction.atomic():
        now = db_now()
        if node.state == Node.DOWN:
            raise NodeProtocolError("register", status=409)
        updated = Node.objects.filter(pk=node.pk, heartbeat_seq__lt=seq).update(
            heartbeat_seq=seq, last_heartbeat_at=now
        )
        if not updated:
            raise NodeProtocolError(f"seq {seq} is not newer than the last one received", status=409, field="seq")
        try:
            faults = health_update(node=node, reports=report.get("gpus") or [], now=now)
            telemetry_ingest(node=node, rows=report.get("telemetry") or [], now=now)
        except TelemetryError as exc:
            raise NodeProtocolError(str(exc), status=400, field=exc.field) from None
        delivered = Job.objects.filter(
            state=JobState.ADMITTED, allocations__node=node, allocations__ended_at__isnull=True
        ).values_list("pk", flat=True).distinct()
        for job_id in sorted(delivered):  # row locks in id order, like the cycle: no deadlocks
            job_transition(job_id, from_states=(JobState.ADMITTED,), to_state=JobState.STARTING,
                           cause=f"delivered to node {node.name}", at=now)
    if faults:
        from scheduler.tasks import run_cycle

        run_cycle.delay_on_commit()
    return {"heartbeat_interval_s": settings.ROTA_NODE_HEARTBEAT_INTERVAL_S, "assignments": node_assignments(node)}


def _own_job(node: Node, job_id: int, attempt: int) -> Job:
    job = Job.objects.filter(pk=job_id, allocations__node=node).distinct().first()
    if job is None:
        raise NodeProtocolError(f"job {job_id} has no allocation on this node", status=404, field="job_id")
    if attempt != job.attempt:
        raise NodeProtocolError(f"attempt {attempt} is not the job's current attempt ({job.attempt})",
                                status=409, field="attempt")
    return job


def node_job_event(*, node: Node, job_id: int, event: dict) -> Job:
    """A node reports that a job's processes started, exited or could not start on it."""
    kind = event["type"]
    with transaction.atomic():
        now = db_now()
        job = _own_job(node, job_id, event["attempt"])
        job = Job.objects.select_for_update().get(pk=job.pk)
        if kind == "started":
            job_transition(job.pk, from_states=(JobState.ADMITTED, JobState.STARTING), to_state=JobState.RUNNING,
                           cause=f"processes started on {node.name}", at=now,
                           details={"pid": event.get("pid")}, extra={"started_at": now})
        else:
            _end_attempt_on_node(job, node, event, now)
        job.refresh_from_db()
    if kind != "started":
        from scheduler.tasks import run_cycle

        run_cycle.delay_on_commit()
    return job


def _end_attempt_on_node(job: Job, node: Node, event: dict, now) -> None:
    """Close this node's allocations of the attempt; when none remain open, settle the job's state."""
    closed = list(Allocation.objects.filter(job=job, attempt=job.attempt, node=node, ended_at__isnull=True))
    if not closed:
        return  # a duplicate report: already settled
    Allocation.objects.filter(pk__in=[a.pk for a in closed]).update(ended_at=now)
    gpu_seconds = sum((now - a.started_at).total_seconds() * a.share for a in closed)
    exit_code = event.get("exit_code")
    if event["type"] == "start_failed":
        exit_code = exit_code if exit_code is not None else -1
    fields = {"attained_gpu_seconds": F("attained_gpu_seconds") + gpu_seconds}
    if job.exit_code is None and exit_code is not None:
        fields["exit_code"] = exit_code
    Job.objects.filter(pk=job.pk).update(**fields)
    if Allocation.objects.filter(job=job, attempt=job.attempt, ended_at__isnull=True).exists():
        if not job.stop_reason:  # one member of a gang ended: stop the others too
            Job.objects.filter(pk=job.pk, stop_reason=StopReason.NONE).update(stop_reason=StopReason.GANG_EXIT)
        return
    job.refresh_from_db()
    _settle(job, event, now)


def _settle(job: Job, event: dict, now) -> None:
    message = event.get("message") or ""
    code = job.exit_code
    reason = job.stop_reason
    common = {"finished_at": now, "stop_reason": StopReason.NONE}
    agent_stopped = event["type"] == "stopped" and not reason and "time limit" not in message
    if reason in (StopReason.PREEMPT, StopReason.NODE_UNHEALTHY) or agent_stopped:
        cause = {StopReason.PREEMPT: "preempted: requeued", StopReason.NODE_UNHEALTHY: "node unhealthy: requeued"}.get(
            reason, f"stopped by the node agent ({message or 'no reason given'}): requeued"
        )
        job_transition(
            job.pk, from_states=HOLDING_STATES, to_state=JobState.PENDING,
            cause=cause[:300],
            at=now, details={"attempt": job.attempt, "exit_code": code},
            extra={"attempt": job.attempt + 1, "stop_reason": StopReason.NONE, "admitted_at": None,
                   "started_at": None, "exit_code": None, "pending_reason_code": "Requeued",
                   "pending_reason_message": cause[:500]},
        )
    elif job.kind in RESTART_KINDS and not reason and (code not in (0, None) or event.get("signal")):
        delay = min(MAX_RESTART_BACKOFF_S, RESTART_BACKOFF_S * 2 ** job.restarts)
        job_transition(
            job.pk, from_states=HOLDING_STATES, to_state=JobState.PENDING,
            cause=f"service failed (exit {code}, signal {event.get('signal')}): restarting in {delay} s",
            at=now, details={"attempt": job.attempt, "exit_code": code, "backoff_s": delay},
            extra={"attempt": job.attempt + 1, "restarts": job.restarts + 1, "admitted_at": None,
                   "started_at": None, "exit_code": None, "not_before": now + timedelta(seconds=delay),
                   "pending_reason_code": "Backoff",
                   "pending_reason_message": f"restarting after a failure; not before {delay} s from the failure"},
        )
    elif reason == StopReason.IDLE:
        job_transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.CANCELLED,
                       cause=f"reclaimed: GPUs idle for {job.idle_timeout_minutes} min", at=now,
                       details={"exit_code": code}, extra=common)
    elif reason == StopReason.CANCEL:
        job_transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.CANCELLED,
                       cause="cancelled: processes stopped",
                       at=now, details={"exit_code": code}, extra=common)
    elif reason == StopReason.TIMEOUT or "time limit" in message:
        job_transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.TIMED_OUT,
                       cause="time limit reached", at=now, details={"exit_code": code}, extra=common)
    elif event["type"] == "start_failed":
        job_transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.FAILED,
                       cause=f"could not start: {message}"[:300], at=now, details={"exit_code": code},
                       extra={**common, "failure_class": "platform"})
    elif code == 0:
        job_transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.SUCCEEDED, cause="exited with code 0",
                       at=now, details={"exit_code": 0}, extra=common)
    else:
        sig = event.get("signal")
        cause = f"killed by signal {sig}" if sig else f"exited with code {code}"
        job_transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.FAILED, cause=cause, at=now,
                       details={"exit_code": code, "signal": sig},
                       extra={**common, "failure_class": "resource" if sig == 9 else "user"})


def node_job_log(*, node: Node, job_id: int, attempt: int, offset: int, data: str) -> int:
    """Append a chunk of a job's output; chunks already stored are ignored. Returns the stored size."""
    job = _own_job(node, job_id, attempt)
    chunk = data.encode()
    with transaction.atomic():
        entry, _ = JobLog.objects.select_for_update().get_or_create(job=job, attempt=attempt)
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
    """Mark nodes silent for longer than the heartbeat timeout (by the database clock) ``down`` and requeue
    their jobs. Returns the names of the nodes marked down."""
    marked = []
    with transaction.atomic():
        now = db_now()
        cutoff = now - timedelta(seconds=settings.ROTA_NODE_HEARTBEAT_TIMEOUT_S)
        silent = list(
            Node.objects.select_for_update(skip_locked=True).exclude(state=Node.DOWN).filter(last_heartbeat_at__lt=cutoff)
        )
        for node in silent:
            Node.objects.filter(pk=node.pk).update(
                state=Node.DOWN, state_reason=f"no heartbeat for {settings.ROTA_NODE_HEARTBEAT_TIMEOUT_S}s",
                state_changed_at=now, state_changed_by=None,
            )
            for alloc_job in Job.objects.filter(
                allocations__node=node, allocations__ended_at__isnull=True, state__in=HOLDING_STATES
            ).distinct():
                Allocation.objects.filter(job=alloc_job, ended_at__isnull=True).update(ended_at=now)
                job_transition(
                    alloc_job.pk, from_states=HOLDING_STATES, to_state=JobState.PENDING,
                    cause=f"node {node.name} lost: requeued", at=now,
                    extra={"attempt": alloc_job.attempt + 1, "stop_reason": StopReason.NONE, "admitted_at": None,
                           "started_at": None, "pending_reason_code": "Requeued",
                           "pending_reason_message": f"node {node.name} stopped answering; requeued"},
                )
            marked.append(node.name)
    return marked


def node_set_state(*, node: Node, state: str, reason: str, user) -> Node:
    """Drain, resume or otherwise set a node's state by hand, recording who and why. Draining keeps
    running work and takes no new work; resume makes the node ready again."""
    if state not in dict(Node.STATES):
        raise NodeProtocolError(f"state must be one of {', '.join(dict(Node.STATES))}", field="state")
    if not reason.strip():
        raise NodeProtocolError("a reason is required", field="reason")
    with transaction.atomic():
        now = db_now()
        Node.objects.filter(pk=node.pk).update(state=state, state_reason=reason.strip()[:300], state_changed_by=user,
                                               state_changed_at=now)
        if state == Node.READY:
            for gpu in node.gpus.filter(present=True, healthy=False):
                Gpu.objects.filter(pk=gpu.pk).update(healthy=True, health_reason="",
                                                     fault_acknowledged=gpu.health_reason)
    node.refresh_from_db()
    return node
