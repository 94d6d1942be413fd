"""ORM -> core: build the engine's Snapshot from the database in a fixed number of queries."""

import json
from datetime import UTC, datetime, timedelta
from operator import attrgetter

from django.conf import settings
from django.db import connection
from django.db.models import BigIntegerField, FloatField, Func, Prefetch, Q, QuerySet, TextField, Value
from django.db.models.functions import Cast, NullIf

from portal.models import Team
from scheduler.checkpoints import checkpoint_of_attempt
from scheduler.core.types import (
    HELD,
    PENDING,
    RUNNING,
    GpuDevice,
    JobInfo,
    LoanInfo,
    NodeInfo,
    Placement,
    Policy,
    PriorityClassInfo,
    QuotaInfo,
    Snapshot,
    TeamInfo,
)
from scheduler.images import ImageError, image_parse, image_resolve, pools_allowing
from scheduler.models import Allocation, Gpu, Job, Node, Pool, PriorityClass, Quota, QuotaLoan
from scheduler.models.jobs import ACTIVE_STATES, JobState
from scheduler.selectors_lost_work import lost_work_credits
from scheduler.selectors_policies import policy_active
from scheduler.services import runtime

_CORE_STATE = {
    JobState.PENDING: PENDING,
    JobState.HELD: HELD,
    JobState.ADMITTED: RUNNING,
    JobState.STARTING: RUNNING,
    JobState.RUNNING: RUNNING,
}


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


# Microseconds since 1970 of a timestamp column, exactly: PostgreSQL's EXTRACT gives an exact numeric; SQLite
# (the demo fallback) stores "YYYY-MM-DD HH:MM:SS[.ffffff]" in UTC.
_MICROS_SQL = {
    "postgresql": "(EXTRACT(EPOCH FROM %(expressions)s) * 1000000)::bigint",
    "sqlite": "(CAST(strftime('%%%%s', %(expressions)s) AS INTEGER) * 1000000"
              " + CAST(substr(%(expressions)s || '.000000', 21, 6) AS INTEGER))",
}


class EpochMicros(Func):
    """A datetime column as whole microseconds since 1970, computed by the database (building datetime
    objects for every row would cost more than the rest of reading it)."""

    output_field = BigIntegerField()

    def as_sql(self, compiler, connection, **extra):
        return super().as_sql(compiler, connection, template=_MICROS_SQL[connection.vendor], **extra)


class Epoch(EpochMicros):
    """A datetime column as seconds since 1970: the float ``datetime.timestamp()`` gives."""

    output_field = FloatField()

    def as_sql(self, compiler, connection, **extra):
        sql, params = super().as_sql(compiler, connection, **extra)
        # a float from the database itself (PostgreSQL's quotient is numeric): read without Django's converter
        return f"(({sql} / 1000000.0){'::float8' if connection.vendor == 'postgresql' else ''})", params


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // _MICROSECOND


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def decayed_usage(now: datetime, half_life_s: float) -> dict[str, float]:
    """Each team's GPU-seconds over the last four half-lives, each allocation weighted by
    0.5 ** (age of its end / half-life). Open allocations count up to ``now`` with weight 1. Work lost to
    preemption is credited back (``scheduler.selectors_lost_work``): a team is not charged in fair share
    for GPU time whose work another team's job took away."""
    since = now - timedelta(seconds=4 * half_life_s)
    now_us, since_us = _micros(now), _micros(since)
    rows = _raw_rows(Allocation.objects.filter(started_at__lt=now).exclude(ended_at__lt=since).values_list(
        "job__team__name", "share_milli", EpochMicros("started_at"), EpochMicros("ended_at")
    ))
    usage: dict[str, float] = {}
    for team, share_milli, started, ended in rows:
        end = ended if ended is not None else now_us
        seconds = max(0, end - max(started, since_us)) / 1e6 * share_milli / 1000
        age = max(0.0, (now_us - end) / 1e6)
        usage[team] = usage.get(team, 0.0) + seconds * 0.5 ** (age / half_life_s)
    for team, credit in lost_work_credits(now, half_life_s).items():
        usage[team] = max(0.0, usage.get(team, 0.0) - credit)
    return usage


_GPU_ID = attrgetter("gpu_id")
# The columns of a job the engine reads, in the order ``_info`` takes them (the snapshot reads them with one
# query: model instances would cost ~100 us per job, most of a 10,000-job cycle).
_JOB_COLUMNS = (
    "id", "team__name", "submitted_by__username", "kind", "priority_class__name", "priority_class__value",
    "preemptible", "gpus", "gpu_fraction", "gpu_model__name", "gpu_memory_gb", "cpus", "memory_gb", "nodes",
    "pool__name", "labels_json", "min_driver_version", "created_s", "time_limit_minutes", "state", "started_s",
    "admitted_s", "stop_reason", "checkpoint_s", "attained_gpu_seconds", "restarts", "image",
)
# A service that failed this many times in a row (no stable run between) restarts without preempting.
CRASH_LOOP_RESTARTS = 2
_JOB_EPOCHS = {"created_s": Epoch("created_at"), "started_s": Epoch("started_at"), "admitted_s": Epoch("admitted_at"),
               "checkpoint_s": Epoch("last_checkpoint_at"),
               # the labels as JSON text, NULL when there are none (most jobs): see _job_rows
               "labels_json": NullIf(Cast("node_labels", TextField()), Value("{}", TextField()))}
_LABELS, _KIND, _IMAGE = (_JOB_COLUMNS.index(name) for name in ("labels_json", "kind", "image"))


def _raw_rows(values: QuerySet) -> list[tuple]:
    """The rows of a ``values_list`` query read with a plain cursor: Django's converters, called for every
    value, cost as much as the rest of the snapshot. So each value comes as the driver reads it (the columns
    read so are integers, floats, text and booleans, which the driver gives as Django would)."""
    with connection.cursor() as cursor:
        cursor.execute(*values.query.sql_with_params())
        return cursor.fetchall()


def _job_rows(now: datetime) -> list[tuple]:
    """The ``_JOB_COLUMNS`` of every job the engine sees (active, and not backing off), in id order, read with
    a plain cursor (``_raw_rows``), the labels as JSON text (``_with_labels`` parses them)."""
    backing_off = Q(state=JobState.PENDING, not_before__gt=now)
    return _raw_rows(Job.objects.filter(state__in=ACTIVE_STATES).exclude(backing_off).order_by("id").annotate(
        **_JOB_EPOCHS).values_list(*_JOB_COLUMNS))


def _with_labels(row: tuple) -> tuple:
    """A row of ``_job_rows`` with its labels' JSON text parsed (most jobs have none: NULL)."""
    if row[_LABELS] is None:
        return row
    return (*row[:_LABELS], json.loads(row[_LABELS]), *row[_LABELS + 1:])


class JobInfos:
    """The engine's view of each job, kept from one snapshot to the next by whoever builds snapshots again and
    again (the cycle, ``scheduler.cycle``). A job's ``JobInfo`` is a function of its row, what it holds and the
    pools its image may run in (``_info``), and between two cycles almost none of these change: a job whose
    three are those of the last snapshot gets the very ``JobInfo`` built then (they are immutable) instead of
    a new one (~30 us a job: ~60 ms of a cycle at 2,000 waiting jobs). Only the last snapshot's are kept."""

    def __init__(self) -> None:
        self._last: dict[tuple, JobInfo] = {}

    def build(self, rows: list[tuple], placements: dict[int, list[Placement]], images: "ImageRule"
              ) -> tuple[JobInfo, ...]:
        """The ``JobInfo`` of each of ``rows`` (``_job_rows``), in their order."""
        last, kept = self._last, {}
        for row in rows:
            held = tuple(sorted(held, key=_GPU_ID)) if (held := placements.get(row[0])) else ()
            key = (row, held, images.pools_for(row[_IMAGE], row[_KIND]))
            kept[key] = last.get(key) or _info(_with_labels(row), held, images)
        self._last = kept
        return tuple(kept.values())


class ImageRule:
    """Which pools' allow-lists admit each job's image (``scheduler.images``): the kinds' default images and
    the pools' lists are read once (two queries), the answer is kept per image."""

    def __init__(self):
        self.defaults = runtime.kind_images()
        self.allow_lists = dict(Pool.objects.values_list("name", "allowed_images"))
        self.site_default = settings.ROTA_DEFAULT_IMAGE
        self._pools: dict[str, frozenset[str]] = {}
        self._answers: dict[tuple[str, str], tuple[str, frozenset[str]]] = {}  # (image, kind) -> the answer

    def pools_for(self, image: str, kind: str) -> tuple[str, frozenset[str]]:
        """The image a job of ``kind`` asking for ``image`` runs in, and the pools that allow it (none for a
        reference that does not parse: such a job was refused at submit, or its kind's default was)."""
        answer = self._answers.get((image, kind))
        if answer is None:
            resolved = image_resolve(image, kind, self.defaults, self.site_default)
            pools = self._pools.get(resolved)
            if pools is None:
                try:
                    pools = pools_allowing(image_parse(resolved), self.allow_lists)
                except ImageError:
                    pools = frozenset()
                self._pools[resolved] = pools
            answer = self._answers[image, kind] = (resolved, pools)
        return answer


def _info(row: tuple, placements: tuple[Placement, ...], images: ImageRule) -> JobInfo:
    """A ``JobInfo`` from a job's ``_JOB_COLUMNS`` values (times in seconds since 1970)."""
    (pk, team, user, kind, class_name, class_value, preemptible, gpus, fraction, model, memory_gb, cpus, ram_gb,
     nodes, pool, labels, driver, created, limit_minutes, state, started, admitted, stop_reason, checkpoint,
     attained, restarts, image) = row
    image, image_pools = images.pools_for(image, kind)
    started = started if started is not None else admitted
    return JobInfo(
        id=pk, team=team, user=user, kind=kind, priority_class=class_name, priority=class_value,
        preemptible=preemptible, gpus=gpus, gpu_fraction=float(fraction) if fraction is not None else None,
        gpu_models=(model,) if model else (), gpu_memory_mb=memory_gb * 1024, cpus=cpus, memory_mb=ram_gb * 1024,
        nodes=nodes, pool=pool, node_labels=dict(labels or {}), min_driver_version=driver,
        submitted_at=created,
        time_limit_s=limit_minutes * 60 if limit_minutes else None, state=_CORE_STATE[state],
        started_at=started, placements=placements, terminating=bool(stop_reason),
        last_checkpoint_at=checkpoint_of_attempt(started, checkpoint), attained_gpu_s=attained,
        may_preempt=restarts < CRASH_LOOP_RESTARTS, image=image, image_pools=image_pools,
    )


def job_info(job: Job, *, placements: tuple[Placement, ...] = (), job_id: int | None = None,
             submitted_at: float | None = None) -> JobInfo:
    """The engine's view of ``job`` (its team, submitter, class, model and pool loaded with it). An unsaved
    job (a quote) passes the ``job_id`` and ``submitted_at`` it has not got yet."""
    return _info((
        job_id if job_id is not None else job.pk, job.team.name, job.submitted_by.username, job.kind,
        job.priority_class.name, job.priority_class.value, job.preemptible, job.gpus, job.gpu_fraction,
        job.gpu_model.name if job.gpu_model else None, job.gpu_memory_gb, job.cpus, job.memory_gb, job.nodes,
        job.pool.name if job.pool else None, job.node_labels, job.min_driver_version,
        submitted_at if submitted_at is not None else job.created_at.timestamp(), job.time_limit_minutes, job.state,
        _ts(job.started_at), _ts(job.admitted_at), job.stop_reason, _ts(job.last_checkpoint_at),
        job.attained_gpu_seconds, job.restarts, job.image,
    ), placements, ImageRule())


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


def loan_infos(now: datetime) -> tuple[LoanInfo, ...]:
    """The approved quota loans running at ``now`` (one query); the engine applies them to quotas."""
    return tuple(
        LoanInfo(lender=lender, borrower=borrower, gpu_model=model, gpus=float(gpus), starts_at=start.timestamp(),
                 ends_at=end.timestamp())
        for lender, borrower, model, gpus, start, end in QuotaLoan.objects.filter(
            state=QuotaLoan.APPROVED, starts_at__lte=now, ends_at__gt=now).order_by("id").values_list(
            "lender__name", "borrower__name", "gpu_model__name", "gpus", "starts_at", "ends_at")
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


def build_snapshot(now: datetime, policy: Policy | None = None, *, infos: JobInfos | None = None
                   ) -> tuple[Snapshot, dict[int, int]]:
    """The engine's view of the cluster at ``now`` (database time). Also returns each GPU's node id by GPU id,
    which the dispatcher needs to turn placements into allocations. ``policy``: the active one unless given;
    ``infos``: the jobs' views kept from the caller's last snapshot (``JobInfos``), none unless given."""
    policy = policy or policy_active().policy
    nodes = list(Node.objects.order_by("name").values_list(
        "id", "name", "pool__name", "cpus", "memory_mb", "state", "labels", "driver_version", "cuda_version"))
    node_names = {row[0]: row[1] for row in nodes}
    gpus_by_node: dict[int, list[GpuDevice]] = {}
    node_of_gpu: dict[int, int] = {}
    for pk, node_id, index, model, memory_mb, healthy, mig in Gpu.objects.filter(present=True).order_by(
            "node_id", "index").values_list("id", "node_id", "index", "model__name", "memory_mb", "healthy",
                                            "model__is_mig_profile"):
        node_of_gpu[pk] = node_id
        gpus_by_node.setdefault(node_id, []).append(GpuDevice(
            id=pk, node=node_names[node_id], index=index, model=model, memory_mb=memory_mb, healthy=healthy,
            mig=mig))
    node_infos = tuple(
        NodeInfo(
            name=name, pool=pool, gpus=tuple(gpus_by_node.get(pk, ())), cpus=cpus, memory_mb=int(memory_mb),
            schedulable=state == Node.READY, labels=dict(labels or {}), driver_version=driver, cuda_version=cuda,
        )
        for pk, name, pool, cpus, memory_mb, state, labels, driver, cuda in nodes
    )

    placements: dict[int, list[Placement]] = {}
    for job_id, gpu_id, share in Allocation.objects.filter(ended_at__isnull=True).values_list(
        "job_id", "gpu_id", "share_milli"
    ):
        placements.setdefault(job_id, []).append(Placement(gpu_id=gpu_id, share=share / 1000))

    jobs = (infos or JobInfos()).build(_job_rows(now), placements, ImageRule())

    snapshot = Snapshot(
        now=now.timestamp(), nodes=node_infos, jobs=jobs, teams=team_infos(), quotas=quota_infos(),
        priority_classes=priority_class_infos(), usage=decayed_usage(now, policy.fair_share_half_life_s), policy=policy,
        loans=loan_infos(now), cycle_interval_s=float(settings.ROTA_CYCLE_INTERVAL_S),
    )
    return snapshot, node_of_gpu
