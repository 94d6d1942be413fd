"""Node services: what the node API does on register and heartbeat (the node's GPUs, what it should run),
and drain. What a node reports about its jobs, and how their attempts end, is ``scheduler.services.node_jobs``.

A node speaks only for itself: every function takes the authenticated Node and touches only its GPUs and
the allocations on it. GPUs are released only when the node confirms the job's processes are gone.
"""

import functools
import logging
import re
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Now

from portal.dbrows import CompiledQuery, ModelRows
from portal.models import Team
from scheduler import notebooks
from scheduler.models import Allocation, Gpu, GpuModel, Job, Node, NodeToken, NotebookServer, PriorityClass
from scheduler.models.jobs import HOLDING_STATES, JobState
from scheduler.services import node_cadence, runtime
from scheduler.services.common import db_now, jobs_transition_locked
from scheduler.services.node_engine import engine_state_apply, node_state_view
from scheduler.services.reference import Reference
from scheduler.services.reference import now as reference_now
from scheduler.services.telemetry import TelemetryError, health_update, present_gpus, telemetry_ingest

log = logging.getLogger(__name__)


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


def _model_for(model_name: str, memory_mb: int, models: dict[str, GpuModel]) -> GpuModel:
    """The GPU model a node reports (already checked by the API: Rota's slug form), created on first sight.
    ``models`` (slug -> model) remembers those resolved in this register: each slug is looked up once."""
    slug = _SLUG.sub("-", model_name.lower()).strip("-")[:63] or "unknown"
    if slug not in models:
        models[slug], _ = GpuModel.objects.get_or_create(
            name=slug, defaults={"memory_mb": memory_mb, "display_name": model_name, "is_mig_profile": "g." in slug}
        )
    return models[slug]


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
    changes wait at parked indexes first; a gone GPU whose index is taken moves past the reportable ones.
    A row already as it would be written (the usual register: an agent restarting on the same host) is not
    written, each reported model is looked up once (``_model_for``), and the new devices are inserted together,
    last: a fleet registering for the first time writes each node's GPUs in one statement, not one each."""
    taken = {item["index"] for item, _ in pairs}
    target = {gpu.pk: item["index"] for item, gpu in pairs if gpu is not None}
    kept = {gpu.index for gpu in gone}
    free = (i for i in range(ABSENT_INDEX_BASE, _PARKED_INDEX) if i not in kept)
    for gpu in gone:
        target[gpu.pk] = next(free) if gpu.index in taken else gpu.index
    moving = [gpu for gpu in [g for _, g in pairs if g is not None] + gone if gpu.index != target[gpu.pk]]
    for position, gpu in enumerate(moving):
        Gpu.objects.filter(pk=gpu.pk).update(index=_PARKED_INDEX - position)
    models: dict[str, GpuModel] = {}
    new: list[Gpu] = []
    for item, gpu in pairs:
        model = _model_for(item["model"], item["memory_mb"], models)
        if gpu is None:
            new.append(Gpu(node=node, index=item["index"], uuid=item["uuid"], model=model, memory_mb=item["memory_mb"]))
        elif (gpu.index, gpu.uuid, gpu.model_id, gpu.memory_mb, gpu.present) != (
                item["index"], item["uuid"], model.pk, item["memory_mb"], True):  # a moved row always differs
            Gpu.objects.filter(pk=gpu.pk).update(index=item["index"], uuid=item["uuid"], model=model,
                                                 memory_mb=item["memory_mb"], present=True)
    for gpu in gone:
        if (gpu.index, gpu.present) != (target[gpu.pk], False):
            Gpu.objects.filter(pk=gpu.pk).update(index=target[gpu.pk], present=False)
    Gpu.objects.bulk_create(new)  # a new node's GPUs in one INSERT (their indexes are free: see above)


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
    tenants is refused while isolation is required (see ``isolation_refusal``). The answer tells the node its
    heartbeat's cadence and, where the site serves node control apart (``ROTA_NODE_HEARTBEAT_URL``), where to
    send its heartbeats."""
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
            told = node_cadence.cadence()
            fields = {
                "driver_version": report.get("driver_version", ""), "cuda_version": report.get("cuda_version", ""),
                "cpus": report.get("cpus", 0), "memory_mb": report.get("memory_mb", 0),
                "gpu_backend": report.get("gpu_backend", ""), "agent_version": report.get("agent_version", ""),
                "executor": executor.get("name", ""),
                "executor_info": {key: executor[key] for key in ("isolates", "runtime", "detail") if key in executor},
                "registered_at": now, "last_heartbeat_at": now, "heartbeat_seq": 0, **told,
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
    answer = {"node": node.name, "pool": pool_name, **told, **node_cadence.heartbeat_address()}
    if report.get("engine"):
        answer["node_state"] = node_state_view(node, report["engine"])
    return answer


# What node_assignments reads of an open allocation on the node and what it joins (the GPU, the job, its priority
# class, team and notebook server): about 35 columns of the six tables' ~120, in one query compiled once per
# process and states (``_assignments_query``). A field read by node_assignments, scheduler.services.runtime or
# notebooks.job_env that is not listed here costs a query per job (tests/scheduler/test_request_costs.py).
_ALLOC = ModelRows(Allocation, ("id", "job", "attempt", "share_milli", "gpu"))
_GPU = ModelRows(Gpu, ("id", "index", "uuid", "memory_mb"), "gpu__", _ALLOC.end)
_JOB = ModelRows(Job, ("id", "attempt", "stop_reason", "command", "env", "name", "kind", "service_port", "array",
                       "array_index", "time_limit_minutes", "gpus", "image", "cpus", "memory_gb", "priority_class",
                       "team"), "job__", _GPU.end)
_CLASS = ModelRows(PriorityClass, ("id", "grace_period_s"), "job__priority_class__", _JOB.end)
_TEAM = ModelRows(Team, ("id", "unix_id", "name"), "job__team__", _CLASS.end)
_SERVER = ModelRows(NotebookServer, ("id", "job", "attempt", "token_encrypted"), "job__notebook_server__", _TEAM.end)
_NODE_ID = -(2**62)  # the node's id in the compiled queries: no node has it


@functools.cache
def _assignments_query(states: tuple[str, ...]) -> CompiledQuery:
    return CompiledQuery(
        lambda node_id: Allocation.objects.filter(node_id=node_id, ended_at__isnull=True, job__state__in=states)
        .order_by("job_id", "gpu__index")
        .values_list(*(name for part in (_ALLOC, _GPU, _JOB, _CLASS, _TEAM, _SERVER) for name in part.names)),
        node_id=_NODE_ID,
    )


def _open_allocations(node: Node, states: tuple[str, ...]) -> list[Allocation]:
    """The open allocations on ``node`` of the jobs in ``states``, by job and GPU index, each with its GPU and
    its job (one object per job), the job with its priority class, team and notebook server, as
    ``select_related`` gives them (but only the columns listed above)."""
    allocs, jobs = [], {}
    for row in _assignments_query(tuple(states)).rows(node_id=node.pk):
        alloc = _ALLOC.build(row)
        alloc.gpu = _GPU.build(row)
        job = jobs.get(alloc.job_id)
        if job is None:
            job = jobs[alloc.job_id] = _JOB.build(row)
            job.priority_class, job.team = _CLASS.build(row), _TEAM.build(row)
            Job.notebook_server.related.set_cached_value(job, _SERVER.build(row))  # None: it has none
        alloc.job = job
        allocs.append(alloc)
    return allocs


def node_assignments(node: Node, states: tuple[str, ...] = HOLDING_STATES, reference: Reference | None = None
                     ) -> list[dict]:
    """What should run on ``node`` now: every job in ``states`` (default: every holding job) with an open
    allocation here, with the image it runs in, the team identity it runs as and its limits (see
    ``scheduler.services.runtime``). The kinds' images are looked up in ``reference`` (default: as of now)."""
    allocs = _open_allocations(node, states)
    by_job: dict[int, dict] = {}
    jobs: dict[int, tuple[Job, float]] = {}  # job id -> the job and its share of a GPU here
    images: dict[str, str] | None = None  # the kinds' default images, looked up once there is a job to send
    for alloc in allocs:
        job = alloc.job
        if alloc.attempt != job.attempt:
            continue
        entry = by_job.get(job.pk)
        if entry is None:
            images = (reference or reference_now()).kind_images() if images is None else images
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
    if spread:
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


# The jobs a heartbeat locks: those held on the node (see node_heartbeat), in id order, with their states.
_HELD_QUERY = CompiledQuery(
    lambda node_id: Job.objects.select_for_update(no_key=True).filter(
        pk__in=Allocation.objects.filter(node_id=node_id, ended_at__isnull=True).values("job_id"),
        state__in=HOLDING_STATES).order_by("pk").values_list("pk", "state"),
    node_id=_NODE_ID,
)
# A heartbeat's own write, stamped by the database's clock (``db_now``'s) in the same statement, which returns it.
_HEARTBEAT_RECORD = (
    f'UPDATE "{Node._meta.db_table}" SET heartbeat_seq = %(seq)s, last_heartbeat_at = clock_timestamp(), '
    "heartbeat_interval_s = %(heartbeat_interval_s)s, heartbeat_timeout_s = %(heartbeat_timeout_s)s "
    "WHERE id = %(node)s AND heartbeat_seq < %(seq)s RETURNING last_heartbeat_at, clock_timestamp()"
)


def _heartbeat_record(node: Node, seq: int, told: dict[str, int]) -> tuple[datetime, datetime] | None:
    """Store heartbeat ``seq`` of ``node`` and the cadence it is told; return when, and the answer's stamp (None:
    ``seq`` is not newer than the last one received, nothing written). One statement: the clock's read is the
    write's. The stamp is read in RETURNING, once the row is held: the written time was read before the row's lock
    was taken, maybe while a delivery held it (``node_delivery``), and would stamp this answer before that one."""
    with connection.cursor() as cursor:
        cursor.execute(_HEARTBEAT_RECORD, {"seq": seq, "node": node.pk, **told})
        row = cursor.fetchone()
    return (row[0], row[1]) if row else None


def _deliver(node: Node, held: list[tuple[int, str]], now: datetime, reference: Reference | None) -> list[dict]:
    """Mark the admitted jobs of ``held`` (the node's jobs, locked in id order) delivered, and return what should
    run on ``node`` now (``node_assignments``)."""
    jobs_transition_locked([job_id for job_id, state in held if state == JobState.ADMITTED], at=now,
                           from_state=JobState.ADMITTED, to_state=JobState.STARTING,
                           cause=f"delivered to node {node.name}")
    # Read after the writes: a job stopped meanwhile is told "stopped", and one the cycle admitted after the
    # lock (still "admitted") waits for the next answer: none reaches a node unmarked (so a node that held
    # nothing has nothing to be told).
    return node_assignments(node, states=(JobState.STARTING, JobState.RUNNING), reference=reference) if held else []


# A delivery locks the node's row, as a heartbeat's write does, before it reads the clock: a node's answers are
# stamped (``as_of``) in the order their reads saw the state, whichever request brought them. The node's state and
# executor are read again under the lock, and the token the wait was authorized with must still work.
_LOCKED_NODE = ModelRows(Node, ("id", "state", "executor_info"))
_TOKEN_ID = _NODE_ID + 1  # the token's id in the compiled query: no token has it
_NODE_LOCK = CompiledQuery(
    lambda node_id, token_id: Node.objects.select_for_update(no_key=True).filter(
        pk=node_id, pk__in=NodeToken.objects.filter(NodeToken.usable_at(Now()), pk=token_id).values("node_id"))
    .values_list(*_LOCKED_NODE.names),
    node_id=_NODE_ID, token_id=_TOKEN_ID,
)


def _stamp(now: datetime) -> str:
    """An answer's ``as_of``: the database's clock when its read began, ISO 8601 to the microsecond."""
    return now.isoformat(timespec="microseconds")


def node_delivery(*, node: Node, token_id: int, reference: Reference | None = None) -> dict | None:
    """What a node's long-poll brings with its news when the node asked for it (``POST /api/v1/node/wait/`` with
    ``"assignments": true``): the assignments its next heartbeat would have taken delivery of, as a heartbeat
    marks them delivered, stamped ``as_of`` (the node applies an answer only if it is newer than the last it
    applied). No liveness write, no cadence (a heartbeat stores the deadline it tells): the heartbeats keep their
    interval. None when the node must heartbeat instead: its token (``token_id``, the one its wait was authorized
    with) no longer works (the heartbeat is refused), or it is down, or it no longer isolates tenants where that is
    required (that answer tells it to register again)."""
    with transaction.atomic():
        locked = [_LOCKED_NODE.build(row) for row in _NODE_LOCK.rows(node_id=node.pk, token_id=token_id)]
        if not locked or locked[0].state == Node.DOWN or isolation_refusal(
                node, {"isolates": locked[0].isolates_tenants}):
            return None
        now = db_now()
        assignments = _deliver(node, _HELD_QUERY.rows(node_id=node.pk), now, reference)
    return {"as_of": _stamp(now), "assignments": assignments}


def node_heartbeat(*, node: Node, report: dict, reference: Reference | None = None) -> dict:
    """Accept a heartbeat (strictly increasing ``seq``), record GPU health, return the assignments (the kinds'
    images looked up in ``reference``, default: as of now)."""
    seq = report["seq"]
    engine = report.get("engine")
    engine_down = bool(engine) and engine["state"] == Node.DOWN
    with transaction.atomic():
        if node.state == Node.DOWN and not engine_down:  # a node its engine calls down keeps reporting
            raise NodeProtocolError("register", status=409)
        if isolation_refusal(node, {"isolates": node.isolates_tenants}):  # required since it registered
            raise NodeProtocolError("register", status=409)
        told = node_cadence.cadence()  # the node's deadline is written with its heartbeat
        recorded = _heartbeat_record(node, seq, told)
        if recorded is None:
            raise NodeProtocolError(f"seq {seq} is not newer than the last one received", status=409, field="seq")
        now, as_of = recorded
        # The jobs held here are locked first, in id order, as the cycle locks its victims: the writes below
        # (a failed GPU's jobs told to stop, delivered jobs marked starting) then never wait on a cycle that
        # waits on this heartbeat. No-key locks: samples referencing the jobs (key share) do not conflict.
        held = _HELD_QUERY.rows(node_id=node.pk)
        try:
            verdicts, samples = report.get("gpus") or [], report.get("telemetry") or []
            gpus = present_gpus(node) if verdicts or samples else {}  # read once for both
            faults = health_update(node=node, reports=verdicts, now=now, gpus=gpus)
            telemetry_ingest(node=node, rows=samples, now=now, gpus=gpus)
        except TelemetryError as exc:
            raise NodeProtocolError(str(exc), status=400, field=exc.field) from None
        if engine:
            engine_state_apply(node=Node.objects.get(pk=node.pk), engine=engine, now=now)
            if engine_down:  # its jobs were settled as lost: the cycle places them elsewhere
                from scheduler.tasks import run_cycle

                run_cycle.delay_on_commit()
                return {**told, **node_cadence.heartbeat_address(), "as_of": _stamp(as_of), "assignments": [],
                        "node_state": node_state_view(node, engine)}
        assignments = _deliver(node, held, now, reference)
    if faults:
        from scheduler.tasks import run_cycle

        run_cycle.delay_on_commit()
    answer = {**told, **node_cadence.heartbeat_address(), "as_of": _stamp(as_of), "assignments": assignments}
    if engine:  # for the bridge to mirror a Rota drain into the engine
        answer["node_state"] = node_state_view(node, engine)
    return answer


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
