"""Node services: what the node API does on register, heartbeat, job events and logs; liveness; drain.

A node speaks only for itself: every function takes the authenticated Node and touches only its GPUs and
the allocations on it. GPUs are released only when the node confirms the job's processes are gone.
"""

import logging
import re
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F

from scheduler import notebooks
from scheduler.models import Allocation, Gpu, GpuModel, Job, JobLog, Node, SchedulerBeat
from scheduler.models.jobs import HOLDING_STATES, FailureReason, JobState, StopReason
from scheduler.retries import FAILED, NODE_LOST, START_FAILED, TIMED_OUT
from scheduler.services import runtime
from scheduler.services.common import db_now, job_transition, jobs_transition_locked
from scheduler.services.lost_work import preemption_complete
from scheduler.services.node_engine import engine_state_apply, node_state_view
from scheduler.services.replica_health import restart_cause
from scheduler.services.retries import job_retry
from scheduler.services.telemetry import TelemetryError, health_update, telemetry_ingest

log = logging.getLogger(__name__)


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


class NodeProtocolError(Exception):
    """A report the portal refuses; ``status`` is the HTTP status, ``field`` the offending field."""

    def __init__(self, message: str, *, status: int = 400, field: str | None = None):
        super().__init__(message)
        self.status = status
        self.field = field


_SLUG = re.compile(r"[^a-z0-9.]+")
# Indexes an agent reports stay below this (whole GPUs, and MIG slices at 100 + 10 x parent + slot); a GPU
# that is gone and whose index another device now has is kept, absent, at the first free index from here.
ABSENT_INDEX_BASE = 1024
_PARKED_INDEX = 32767  # where rows wait, one statement at a time, while indexes are swapped


def _model_for(model_name: str, memory_mb: int) -> GpuModel:
    """The GPU model a node reports (already checked by the API: Rota's slug form), created on first sight."""
    slug = _SLUG.sub("-", model_name.lower()).strip("-")[:63] or "unknown"
    model, _ = GpuModel.objects.get_or_create(
        name=slug, defaults={"memory_mb": memory_mb, "display_name": model_name, "is_mig_profile": "g." in slug}
    )
    return model


def _match_gpus(rows: list[Gpu], reports: list[dict]) -> tuple[list[tuple[dict, Gpu | None]], list[Gpu]]:
    """Pair each reported device with its row: the row of its UUID (a device keeps its samples, health and
    allocations when the host numbers it differently after a reboot), else the row at its index whose
    device is no longer reported (a replaced card), else none (a new device). Also returns the rows of the
    devices that are gone."""
    by_uuid = {gpu.uuid: gpu for gpu in rows}
    reported = {item["uuid"] for item in reports}
    gone_by_index = {gpu.index: gpu for gpu in rows if gpu.uuid not in reported}
    pairs = [(item, by_uuid.get(item["uuid"]) or gone_by_index.pop(item["index"], None)) for item in reports]
    return pairs, sorted(gone_by_index.values(), key=lambda gpu: gpu.index)


def _save_gpus(node: Node, pairs: list[tuple[dict, Gpu | None]], gone: list[Gpu]) -> None:
    """Write the matched rows in place. (node, index) is unique after every statement, so rows whose index
    changes wait at parked indexes first; a gone GPU whose index is taken moves past the reportable ones."""
    taken = {item["index"] for item, _ in pairs}
    target = {gpu.pk: item["index"] for item, gpu in pairs if gpu is not None}
    kept = {gpu.index for gpu in gone}
    free = (i for i in range(ABSENT_INDEX_BASE, _PARKED_INDEX) if i not in kept)
    for gpu in gone:
        target[gpu.pk] = next(free) if gpu.index in taken else gpu.index
    moving = [gpu for gpu in [g for _, g in pairs if g is not None] + gone if gpu.index != target[gpu.pk]]
    for position, gpu in enumerate(moving):
        Gpu.objects.filter(pk=gpu.pk).update(index=_PARKED_INDEX - position)
    for item, gpu in pairs:
        model = _model_for(item["model"], item["memory_mb"])
        if gpu is None:
            Gpu.objects.create(node=node, index=item["index"], uuid=item["uuid"], model=model,
                               memory_mb=item["memory_mb"])
        else:
            Gpu.objects.filter(pk=gpu.pk).update(index=item["index"], uuid=item["uuid"], model=model,
                                                 memory_mb=item["memory_mb"], present=True)
    for gpu in gone:
        Gpu.objects.filter(pk=gpu.pk).update(index=target[gpu.pk], present=False)


def isolation_refusal(node: Node, executor: dict) -> NodeProtocolError | None:
    """Why ``node`` may not run work with ``executor`` (what it registered with): under
    settings.ROTA_REQUIRE_ISOLATION only an executor that isolates tenants may (409, field ``executor``)."""
    if not settings.ROTA_REQUIRE_ISOLATION or executor.get("isolates"):
        return None
    name = executor.get("name") or "an unnamed executor"
    fix = ("run the Slurm bridge as root so that sbatch runs each job as its team's uid" if name == "slurm" else
           "install Podman on the node so that its agent uses the container executor")
    return NodeProtocolError(
        f"node {node.name} runs jobs with {name}, which does not isolate tenants, and this portal requires "
        f"isolation (ROTA_REQUIRE_ISOLATION): {fix}", status=409, field="executor")


def node_register(*, node: Node, report: dict) -> dict:
    """Record what the agent found on its host. GPUs are known by UUID (see ``_match_gpus``); a UUID that
    another node holds is refused (400, field ``gpus``). A GPU that disappeared is marked absent and the
    node drained with a reason. A node that was down becomes ready. A node whose executor does not isolate
    tenants is refused while isolation is required (see ``isolation_refusal``)."""
    executor = report.get("executor") or {}
    refusal = isolation_refusal(node, executor)
    if refusal:
        raise refusal
    gpus_in = report["gpus"]
    pool_name = node.pool.name  # the authenticated node comes with its pool
    uuids = [item["uuid"] for item in gpus_in]
    foreign = sorted(Gpu.objects.filter(uuid__in=uuids).exclude(node=node).values_list("uuid", "node__name"))
    if foreign:
        owners = sorted({owner for _uuid, owner in foreign})
        shown = ", ".join(u for u, _owner in foreign[:4])
        if len(foreign) > 4:
            shown += f" and {len(foreign) - 4} more"
        hint = ""
        if report.get("gpu_backend") == "fake":  # fake GPUs take their UUIDs from the fake node's name
            hint = f"; a fake node's GPU UUIDs follow its name: start this agent with --hostname {node.name}"
        raise NodeProtocolError(f"{len(foreign)} reported GPU UUID(s) belong to node {', '.join(owners)} "
                                f"({shown}){hint}", field="gpus")
    try:
        with transaction.atomic():
            now = db_now()
            node = Node.objects.select_for_update().get(pk=node.pk)
            pairs, gone = _match_gpus(list(node.gpus.all()), gpus_in)
            missing = sorted(gpu.index for gpu in gone)
            _save_gpus(node, pairs, gone)
            fields = {
                "driver_version": report.get("driver_version", ""), "cuda_version": report.get("cuda_version", ""),
                "cpus": report.get("cpus", 0), "memory_mb": report.get("memory_mb", 0),
                "gpu_backend": report.get("gpu_backend", ""), "agent_version": report.get("agent_version", ""),
                "executor": executor.get("name", ""),
                "executor_info": {key: executor[key] for key in ("isolates", "runtime", "detail") if key in executor},
                "registered_at": now, "last_heartbeat_at": now, "heartbeat_seq": 0,
            }
            if missing and node.state in (Node.READY, Node.DOWN):
                fields.update(state=Node.DRAINING,
                              state_reason=f"returned with fewer GPUs (missing index {missing})"[:300],
                              state_changed_at=now, state_changed_by=None)
            elif node.state == Node.DOWN:
                fields.update(state=Node.READY, state_reason="agent registered", state_changed_at=now,
                              state_changed_by=None)
            if "labels" in report:
                fields["labels"] = report["labels"]
            Node.objects.filter(pk=node.pk).update(**fields)
            if report.get("engine"):
                node.refresh_from_db()
                engine_state_apply(node=node, engine=report["engine"], now=now)
    except IntegrityError as exc:  # another node registered one of these UUIDs in the meantime
        if "uuid" not in str(exc):
            raise
        raise NodeProtocolError("a reported GPU UUID belongs to another node", field="gpus") from None
    answer = {
        "node": node.name,
        "pool": pool_name,
        "heartbeat_interval_s": settings.ROTA_NODE_HEARTBEAT_INTERVAL_S,
        "heartbeat_timeout_s": settings.ROTA_NODE_HEARTBEAT_TIMEOUT_S,
    }
    if report.get("engine"):
        answer["node_state"] = node_state_view(node, report["engine"])
    return answer


def node_assignments(node: Node, states: tuple[str, ...] = HOLDING_STATES) -> list[dict]:
    """What should run on ``node`` now: every job in ``states`` (default: every holding job) with an open
    allocation here, with the image it runs in, the team identity it runs as and its limits (see
    ``scheduler.services.runtime``)."""
    allocs = (
        Allocation.objects.filter(node=node, ended_at__isnull=True, job__state__in=states)
        .select_related("job", "job__priority_class", "job__team", "job__notebook_server", "gpu")
        .order_by("job_id", "gpu__index")
    )
    by_job: dict[int, dict] = {}
    jobs: dict[int, tuple[Job, float]] = {}  # job id -> the job and its share of a GPU here
    images: dict[str, str] | None = None  # the kinds' default images, read once there is a job to send
    for alloc in allocs:
        job = alloc.job
        if alloc.attempt != job.attempt:
            continue
        entry = by_job.get(job.pk)
        if entry is None:
            images = runtime.kind_images() if images is None else images
            entry = by_job[job.pk] = {
                "job_id": job.pk, "attempt": job.attempt,
                "desired": "stopped" if job.stop_reason else "running",
                "command": job.command,
                "env": {**(job.env or {}), "ROTA_JOB_ID": str(job.pk), "ROTA_JOB_NAME": job.name,
                        "ROTA_KIND": job.kind,
                        **({"ROTA_PORT": str(job.service_port)} if job.service_port else {}),
                        **notebooks.job_env(job),
                        **({"ROTA_ARRAY_ID": str(job.array_id), "ROTA_ARRAY_INDEX": str(job.array_index)}
                           if job.array_id is not None else {})},
                "port": job.service_port,
                "gpus": [], "time_limit_s": job.time_limit_minutes * 60 if job.time_limit_minutes else None,
                "grace_period_s": job.priority_class.grace_period_s, "kind": job.kind,
                "stop_reason": job.stop_reason,
                "image": runtime.job_image(job, images), "run_as": runtime.run_as(job.team),
            }
            jobs[job.pk] = (job, alloc.share)
        entry["gpus"].append({"index": alloc.gpu.index, "uuid": alloc.gpu.uuid, "share": alloc.share})
        if alloc.share < 1:  # a fraction of a GPU: the job learns its share and the memory it may use
            entry["env"]["ROTA_GPU_FRACTION"] = f"{alloc.share:g}"
            entry["env"]["ROTA_GPU_MEMORY_LIMIT_MB"] = str(int(alloc.share * alloc.gpu.memory_mb))
    # Members of a multi-node gang (a job not all here) learn their peers: node names in order, their own rank.
    peers: dict[int, list[str]] = {}
    spread = [job_id for job_id, entry in by_job.items() if len(entry["gpus"]) < jobs[job_id][0].gpus]
    rows = Allocation.objects.filter(job_id__in=spread, ended_at__isnull=True).values_list("job_id", "node__name")
    for job_id, name in rows.distinct().order_by("job_id", "node__name"):
        peers.setdefault(job_id, []).append(name)
    node_gpus = None  # counted once, for the first job on a share of a GPU
    for job_id, entry in by_job.items():
        names = peers.get(job_id, [node.name])
        entry["env"].update(ROTA_NODES=",".join(names), ROTA_NODE_RANK=str(names.index(node.name)),
                            ROTA_NUM_NODES=str(len(names)), ROTA_MASTER_ADDR=names[0])
        job, share = jobs[job_id]
        if share < 1 and node_gpus is None:
            node_gpus = node.gpus.filter(present=True).count()
        entry["limits"] = runtime.job_limits(job, nodes=len(names), share=share, node=node, node_gpus=node_gpus)
    return list(by_job.values())


def node_heartbeat(*, node: Node, report: dict) -> dict:
    """Accept a heartbeat (strictly increasing ``seq``), record GPU health, return the assignments."""
    seq = report["seq"]
    engine = report.get("engine")
    engine_down = bool(engine) and engine["state"] == Node.DOWN
    with transaction.atomic():
        now = db_now()
        if node.state == Node.DOWN and not engine_down:  # a node its engine calls down keeps reporting
            raise NodeProtocolError("register", status=409)
        if isolation_refusal(node, {"isolates": node.isolates_tenants}):  # required since it registered
            raise NodeProtocolError("register", status=409)
        updated = Node.objects.filter(pk=node.pk, heartbeat_seq__lt=seq).update(
            heartbeat_seq=seq, last_heartbeat_at=now
        )
        if not updated:
            raise NodeProtocolError(f"seq {seq} is not newer than the last one received", status=409, field="seq")
        # The jobs held here are locked first, in id order, as the cycle locks its victims: the writes below
        # (a failed GPU's jobs told to stop, delivered jobs marked starting) then never wait on a cycle that
        # waits on this heartbeat. No-key locks: samples referencing the jobs (key share) do not conflict.
        held = list(Job.objects.select_for_update(no_key=True).filter(
            pk__in=Allocation.objects.filter(node=node, ended_at__isnull=True).values("job_id"),
            state__in=HOLDING_STATES).order_by("pk").values_list("pk", "state"))
        try:
            faults = health_update(node=node, reports=report.get("gpus") or [], now=now)
            telemetry_ingest(node=node, rows=report.get("telemetry") or [], now=now)
        except TelemetryError as exc:
            raise NodeProtocolError(str(exc), status=400, field=exc.field) from None
        if engine:
            engine_state_apply(node=Node.objects.get(pk=node.pk), engine=engine, now=now)
            if engine_down:  # its jobs were settled as lost: the cycle places them elsewhere
                from scheduler.tasks import run_cycle

                run_cycle.delay_on_commit()
                return {"heartbeat_interval_s": settings.ROTA_NODE_HEARTBEAT_INTERVAL_S, "assignments": [],
                        "node_state": node_state_view(node, engine)}
        jobs_transition_locked([job_id for job_id, state in held if state == JobState.ADMITTED], at=now,
                               from_state=JobState.ADMITTED, to_state=JobState.STARTING,
                               cause=f"delivered to node {node.name}")
        # Read after the writes: a job stopped meanwhile is told "stopped", and one the cycle admitted after
        # the lock above (still "admitted") waits for the next heartbeat: none reaches a node unmarked (so a
        # node that held nothing above has nothing to be told).
        assignments = node_assignments(node, states=(JobState.STARTING, JobState.RUNNING)) if held else []
    if faults:
        from scheduler.tasks import run_cycle

        run_cycle.delay_on_commit()
    answer = {"heartbeat_interval_s": settings.ROTA_NODE_HEARTBEAT_INTERVAL_S, "assignments": assignments}
    if engine:  # for the bridge to mirror a Rota drain into the engine
        answer["node_state"] = node_state_view(node, engine)
    return answer


def _reported_attempt(node: Node, job_id: int, attempt: int, *, now, lock: bool = False) -> tuple[Job, bool]:
    """The job a node reports about, and whether the node still holds the reported attempt.

    A node speaks only for an attempt it holds (an open allocation here) or held until moments ago: the
    agent sends an attempt's last log lines, then its end event, once its processes are gone, which can be
    after the portal closed the allocation (the node was marked down and the job requeued), and it resends
    an event whose answer it lost. So for ``LATE_REPORT_WINDOW`` after its allocation here closed the node
    may still report about that attempt. Reports about an attempt the node never held get the 404 of an
    unknown job; the rest are 409 (field ``attempt``). With ``lock`` the job row is locked."""
    unknown = NodeProtocolError(f"job {job_id} has no allocation on this node", status=404, field="job_id")
    if not Allocation.objects.filter(job_id=job_id, node=node).exists():
        raise unknown
    job = (Job.objects.select_for_update() if lock else Job.objects).filter(pk=job_id).first()
    if job is None:
        raise unknown
    held = list(Allocation.objects.filter(job=job, node=node, attempt__in={attempt, job.attempt})
                .values_list("attempt", "ended_at"))
    ends = [ended for held_attempt, ended in held if held_attempt == attempt]
    holds_current = any(held_attempt == job.attempt and ended is None for held_attempt, ended in held)
    if any(ended is None for ended in ends):
        if attempt != job.attempt:
            raise _not_current(job, attempt)
        return job, True
    if not ends:
        raise _not_current(job, attempt) if holds_current else unknown
    if now - max(ends) > LATE_REPORT_WINDOW:
        raise _attempt_over(job_id, attempt)
    return job, False


def _not_current(job: Job, attempt: int) -> NodeProtocolError:
    return NodeProtocolError(f"attempt {attempt} is not the job's current attempt ({job.attempt})", status=409,
                             field="attempt")


def _attempt_over(job_id: int, attempt: int) -> NodeProtocolError:
    return NodeProtocolError(f"attempt {attempt} of job {job_id} is over", status=409, field="attempt")


def node_job_event(*, node: Node, job_id: int, event: dict, wake: bool = True) -> Job:
    """A node reports that a job's processes started, exited or could not start on it. A repeated event
    about the job's current attempt that the node no longer holds (an answer was lost, see ``_reported_attempt``)
    is accepted, changing nothing; an older attempt's is refused (409). An end wakes the cycle unless ``wake``."""
    kind = event["type"]
    with transaction.atomic():
        now = db_now()
        job, holds = _reported_attempt(node, job_id, event["attempt"], now=now, lock=True)
        if not holds:
            if event["attempt"] != job.attempt:
                raise _not_current(job, event["attempt"])
            return job
        if kind == "started":
            job_transition(job.pk, from_states=(JobState.ADMITTED, JobState.STARTING), to_state=JobState.RUNNING,
                           cause=f"processes started on {node.name}", at=now,
                           details={"pid": event.get("pid")},
                           extra={"started_at": now, "service_address": event.get("address", ""),
                                  "service_health": event.get("health", ""), "service_health_message": ""})
        else:
            _end_attempt_on_node(job, node, event, now)
        job.refresh_from_db()
    if kind != "started" and wake:
        from scheduler.tasks import run_cycle

        run_cycle.delay_on_commit()
    return job


def _end_attempt_on_node(job: Job, node: Node, event: dict, now) -> None:
    """Close this node's allocations of the attempt; when none remain open, settle the job's state."""
    exit_code = event.get("exit_code")
    if event["type"] == "start_failed":
        exit_code = exit_code if exit_code is not None else -1
    fields = {"exit_code": exit_code} if job.exit_code is None and exit_code is not None else {}
    if event.get("reason") and not job.failure_reason:  # kept, like the exit code, from the first member to end
        fields.update(failure_reason=event["reason"], failure_message=(event.get("message") or "")[:500])
    if not _close_on_node(job, node, now, **fields):
        return  # a duplicate report: already settled
    if _still_holds(job):
        if not job.stop_reason:  # one member of a gang ended: stop the others too
            Job.objects.filter(pk=job.pk, stop_reason=StopReason.NONE).update(stop_reason=StopReason.GANG_EXIT)
        return
    job.refresh_from_db()
    _settle(job, event, now)


def _close_on_node(job: Job, node: Node, now, **fields) -> bool:
    """End the open allocations of ``job``'s attempt on ``node``, adding their GPU time to what the job has
    received (and setting ``fields``). False when there were none."""
    closed = list(Allocation.objects.filter(job=job, attempt=job.attempt, node=node, ended_at__isnull=True))
    if not closed:
        return False
    Allocation.objects.filter(pk__in=[a.pk for a in closed]).update(ended_at=now)
    gpu_seconds = sum((now - a.started_at).total_seconds() * a.share for a in closed)
    Job.objects.filter(pk=job.pk).update(attained_gpu_seconds=F("attained_gpu_seconds") + gpu_seconds, **fields)
    return True


def _still_holds(job: Job) -> bool:
    """Whether the attempt still holds devices on some node (a gang member that has not ended)."""
    return Allocation.objects.filter(job=job, attempt=job.attempt, ended_at__isnull=True).exists()


def _settle(job: Job, event: dict, now) -> None:
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
            _end_node_lost(job, cause, now, code)
    elif reason == StopReason.PREEMPT:
        cause = "preempted: requeued"
        preemption_complete(job, now)  # the work lost since the last checkpoint, credited back to the team
        job_transition(
            job.pk, from_states=HOLDING_STATES, to_state=JobState.PENDING,
            cause=cause[:300],
            at=now, details={"attempt": job.attempt, "exit_code": code},
            extra={**NO_FAILURE, "attempt": job.attempt + 1, "stop_reason": StopReason.NONE, "admitted_at": None,
                   "started_at": None, "exit_code": None, "pending_reason_code": "Requeued",
                   "pending_reason_message": cause[:500]},
        )
    elif failure == FailureReason.OOM_KILLED and reason in (StopReason.NONE, StopReason.GANG_EXIT):
        # a resource failure, not retried into the same limit (a gang's other members were stopped for it)
        job_transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.FAILED,
                       cause=f"OOMKilled: {failure_message or 'the job exceeded its memory limit'}"[:300], at=now,
                       details={"exit_code": code, "signal": event.get("signal"), "reason": failure},
                       extra={**common, **failed_because, "failure_class": "resource"})
    elif job.kind in RESTART_KINDS and not reason and (code not in (0, None) or event.get("signal")
                                                        or failure == FailureReason.UNHEALTHY):
        # Failures in a row back off longer each time; a run that stayed up STABLE_RUN_S starts the count over.
        stable = job.started_at is not None and (now - job.started_at).total_seconds() >= STABLE_RUN_S
        restarts = 0 if stable else job.restarts
        delay = min(MAX_RESTART_BACKOFF_S, RESTART_BACKOFF_S * 2 ** restarts)
        job_transition(
            job.pk, from_states=HOLDING_STATES, to_state=JobState.PENDING,
            cause=f"{restart_cause(failure, failure_message, code, event.get('signal'))}: restarting in {delay} s",
            at=now, details={"attempt": job.attempt, "exit_code": code, "backoff_s": delay},
            extra={**NO_FAILURE, "attempt": job.attempt + 1, "restarts": restarts + 1, "admitted_at": None,
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
        if not job_retry(job, TIMED_OUT, cause="time limit reached", now=now, exit_code=code):
            job_transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.TIMED_OUT,
                           cause="time limit reached", at=now, details={"exit_code": code}, extra=common)
    elif event["type"] == "start_failed":
        pull = failure == FailureReason.IMAGE_PULL_FAILED  # a wrong or missing image: the submitter's to fix
        cause = f"could not start: {f'{failure}: ' if failure else ''}{failure_message}"
        if pull or not job_retry(job, START_FAILED, cause=cause, now=now, exit_code=code):
            job_transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.FAILED, cause=cause[:300], at=now,
                           details={"exit_code": code, **({"reason": failure} if failure else {})},
                           extra={**common, **failed_because, "failure_class": "user" if pull else "platform"})
    elif code == 0:
        job_transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.SUCCEEDED, cause="exited with code 0",
                       at=now, details={"exit_code": 0}, extra=common)
    else:
        sig = event.get("signal")
        cause = f"killed by signal {sig}" if sig else f"exited with code {code}"
        if not job_retry(job, FAILED, cause=cause, now=now, exit_code=code):
            job_transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.FAILED, cause=cause, at=now,
                           details={"exit_code": code, "signal": sig},
                           extra={**common, "failure_class": "resource" if sig == 9 else "user"})


def _end_node_lost(job: Job, cause: str, now, code: int | None = None) -> None:
    """End ``job`` as ``node-lost``: the platform lost its attempt and its retries are spent."""
    job_transition(job.pk, from_states=HOLDING_STATES, to_state=JobState.NODE_LOST,
                   cause=f"{cause}: no retries left ({job.retries} used)"[:300], at=now,
                   details={"attempt": job.attempt, "exit_code": code},
                   extra={"finished_at": now, "stop_reason": StopReason.NONE, "failure_class": "platform"})


def node_job_log(*, node: Node, job_id: int, attempt: int, offset: int, data: str) -> int:
    """Append a chunk of an attempt's output; chunks already stored are ignored. Returns the stored size.
    Only the node that runs the attempt may send it, or, shortly after, the node that ran it (see
    ``_reported_attempt``), unless the job finished with that attempt."""
    chunk = data.encode()
    with transaction.atomic():
        job, holds = _reported_attempt(node, job_id, attempt, now=db_now())
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
    """Mark nodes silent for longer than the heartbeat timeout (by the database clock) ``down`` and settle
    their jobs' attempts there (see ``_lose_node``). Returns the names of the nodes marked down."""
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
    _close_on_node(job, node, now)
    if _still_holds(job):
        Job.objects.filter(pk=job.pk, stop_reason=StopReason.NONE).update(stop_reason=StopReason.NODE_UNHEALTHY)
        return
    job.refresh_from_db()
    if job.stop_reason in (StopReason.CANCEL, StopReason.TIMEOUT, StopReason.IDLE):
        _settle(job, {"type": "stopped", "message": f"node {node.name} lost"}, now)
        return
    cause = f"node {node.name} stopped answering"
    if not job_retry(job, NODE_LOST, cause=cause, now=now):
        _end_node_lost(job, cause, now)


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
