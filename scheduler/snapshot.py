"""ORM -> core: build the engine's Snapshot from the database in a fixed number of queries."""

from datetime import datetime, timedelta

from django.db.models import Prefetch, Q

from portal.models import Team
from scheduler.core.types import (
    HELD,
    PENDING,
    RUNNING,
    GpuDevice,
    JobInfo,
    NodeInfo,
    Placement,
    Policy,
    PriorityClassInfo,
    QuotaInfo,
    Snapshot,
    TeamInfo,
)
from scheduler.models import Allocation, Gpu, Job, Node, Pool, PriorityClass, Quota
from scheduler.models.jobs import ACTIVE_STATES, JobState

_CORE_STATE = {
    JobState.PENDING: PENDING,
    JobState.HELD: HELD,
    JobState.ADMITTED: RUNNING,
    JobState.STARTING: RUNNING,
    JobState.RUNNING: RUNNING,
}


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def decayed_usage(now: datetime, half_life_s: float) -> dict[str, float]:
    """Each team's GPU-seconds over the last four half-lives, each allocation weighted by
    0.5 ** (age of its end / half-life). Open allocations count up to ``now`` with weight 1."""
    since = now - timedelta(seconds=4 * half_life_s)
    rows = Allocation.objects.filter(started_at__lt=now).exclude(ended_at__lt=since).values_list(
        "job__team__name", "share_milli", "started_at", "ended_at"
    )
    usage: dict[str, float] = {}
    for team, share_milli, started, ended in rows.iterator(chunk_size=5000):
        end = ended or now
        start = max(started, since)
        seconds = max(0.0, (end - start).total_seconds()) * share_milli / 1000
        age = max(0.0, (now - end).total_seconds())
        usage[team] = usage.get(team, 0.0) + seconds * 0.5 ** (age / half_life_s)
    return usage


def job_info(job: Job, *, placements: tuple[Placement, ...] = (), job_id: int | None = None,
             submitted_at: float | None = None) -> JobInfo:
    """The engine's view of ``job`` (its team, submitter, class, model and pool loaded with it). An unsaved
    job (a quote) passes the ``job_id`` and ``submitted_at`` it has not got yet."""
    return JobInfo(
        id=job_id if job_id is not None else job.pk, team=job.team.name, user=job.submitted_by.username,
        kind=job.kind, priority_class=job.priority_class.name, priority=job.priority_class.value,
        preemptible=job.preemptible, gpus=job.gpus,
        gpu_fraction=float(job.gpu_fraction) if job.gpu_fraction is not None else None,
        gpu_models=(job.gpu_model.name,) if job.gpu_model else (),
        gpu_memory_mb=job.gpu_memory_gb * 1024, cpus=job.cpus, memory_mb=job.memory_gb * 1024,
        nodes=job.nodes, pool=job.pool.name if job.pool else None, node_labels=dict(job.node_labels or {}),
        min_driver_version=job.min_driver_version,
        submitted_at=submitted_at if submitted_at is not None else job.created_at.timestamp(),
        time_limit_s=job.time_limit_minutes * 60 if job.time_limit_minutes else None,
        state=_CORE_STATE[job.state], started_at=_ts(job.started_at or job.admitted_at), placements=placements,
        terminating=bool(job.stop_reason), last_checkpoint_at=_ts(job.last_checkpoint_at),
        attained_gpu_s=job.attained_gpu_seconds,
    )


def team_infos() -> tuple[TeamInfo, ...]:
    """Every team with its parent and the pools it may use (two queries)."""
    teams = list(Team.objects.prefetch_related(Prefetch("pools", queryset=Pool.objects.only("name"))))
    names = {t.pk: t.name for t in teams}
    return tuple(
        TeamInfo(name=t.name, parent=names.get(t.parent_id), pools=frozenset(p.name for p in t.pools.all()))
        for t in teams
    )


def quota_infos() -> tuple[QuotaInfo, ...]:
    """Every quota row (one query)."""
    return tuple(
        QuotaInfo(
            team=q.team.name, gpu_model=q.gpu_model.name, guaranteed=float(q.guaranteed),
            limit=float(q.limit) if q.limit is not None else None, weight=float(q.weight),
            non_lendable=float(q.non_lendable), pool=q.pool.name if q.pool else None,
        )
        for q in Quota.objects.select_related("team", "gpu_model", "pool")
    )


def priority_class_infos(values: dict[str, int] | None = None) -> tuple[PriorityClassInfo, ...]:
    """Every priority class (one query); ``values`` overrides some classes' values (what-if)."""
    values = values or {}
    return tuple(
        PriorityClassInfo(
            name=pc.name, value=values.get(pc.name, pc.value), preemptible=pc.preemptible,
            may_preempt=pc.may_preempt, min_runtime_s=pc.min_runtime_s, grace_period_s=pc.grace_period_s,
        )
        for pc in PriorityClass.objects.all()
    )


def build_snapshot(now: datetime, policy: Policy | None = None) -> tuple[Snapshot, dict[int, Gpu]]:
    """The engine's view of the cluster at ``now`` (database time). Also returns GPUs by id, which the
    dispatcher needs to turn placements into allocations."""
    policy = policy or Policy()
    nodes = list(Node.objects.select_related("pool").order_by("name"))
    gpus = list(Gpu.objects.filter(present=True).select_related("model").order_by("node_id", "index"))
    gpus_by_node: dict[int, list[Gpu]] = {}
    for gpu in gpus:
        gpus_by_node.setdefault(gpu.node_id, []).append(gpu)
    node_infos = []
    node_names = {}
    for node in nodes:
        node_names[node.pk] = node.name
        devices = tuple(
            GpuDevice(id=g.pk, node=node.name, index=g.index, model=g.model.name, memory_mb=g.memory_mb,
                      healthy=g.healthy)
            for g in gpus_by_node.get(node.pk, ())
        )
        node_infos.append(
            NodeInfo(
                name=node.name, pool=node.pool.name, gpus=devices, cpus=node.cpus, memory_mb=int(node.memory_mb),
                schedulable=node.state == Node.READY, labels=dict(node.labels or {}),
                driver_version=node.driver_version, cuda_version=node.cuda_version,
            )
        )

    placements: dict[int, list[Placement]] = {}
    for job_id, gpu_id, share in Allocation.objects.filter(ended_at__isnull=True).values_list(
        "job_id", "gpu_id", "share_milli"
    ):
        placements.setdefault(job_id, []).append(Placement(gpu_id=gpu_id, share=share / 1000))

    jobs = []
    backing_off = Q(state=JobState.PENDING, not_before__gt=now)
    for job in Job.objects.filter(state__in=ACTIVE_STATES).exclude(backing_off).select_related(
        "team", "submitted_by", "priority_class", "gpu_model", "pool"
    ).order_by("id"):
        jobs.append(job_info(job, placements=tuple(sorted(placements.get(job.pk, ()), key=lambda p: p.gpu_id))))

    snapshot = Snapshot(
        now=now.timestamp(), nodes=tuple(node_infos), jobs=tuple(jobs), teams=team_infos(), quotas=quota_infos(),
        priority_classes=priority_class_infos(), usage=decayed_usage(now, policy.fair_share_half_life_s), policy=policy,
    )
    return snapshot, {g.pk: g for g in gpus}
