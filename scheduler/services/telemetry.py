"""Telemetry and health reported by nodes: store samples (attributed to the job holding each GPU), keep
the latest values on the GPU row, turn faults into unhealthy GPUs and drained nodes, roll samples up."""

import logging
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Avg, Count, Max
from django.db.models.functions import TruncHour

from portal.dbrows import CompiledQuery, ModelRows
from scheduler.models import Allocation, Gpu, GpuSample, GpuSampleRollup, Job, JobEvent, Node
from scheduler.models.jobs import HOLDING_STATES, StopReason

log = logging.getLogger(__name__)

# XIDs caused by the user's program (NVIDIA's classification): a job event, not a sick GPU.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68})
# Agent clocks further than this from the database clock are corrected by the measured offset.
MAX_CLOCK_SKEW = timedelta(seconds=30)
RAW_RETENTION = timedelta(hours=24)
# A node clock further than this from the database clock is not skewed but broken (year 1 or 9999): its
# samples are refused, not corrected. Within it a wrong clock (a dead RTC battery, a missed NTP sync) is
# corrected as above.
MAX_AGENT_CLOCK_OFFSET = timedelta(days=730)
# A sample older than the raw retention (once corrected) would be rolled up and deleted at once: refused.
# The agent buffers minutes of samples while the portal is away, not days.
MAX_SAMPLE_AGE = RAW_RETENTION
# The ledger sums a day only an hour (its LATE_COMMIT_SLACK) after it ends: no sample newer than this can
# belong to a summed day.
LATE_SAMPLE = timedelta(hours=1)


class TelemetryError(Exception):
    """A batch the portal refuses whole (nothing stored); ``field`` names the offending field."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def _hours(span: timedelta) -> int:
    return int(span.total_seconds() // 3600)


# What the health verdicts and the samples read of the node's GPUs, and of the allocations holding them: the same
# queries at every agent's heartbeat, compiled once (a field read of a GPU that is not listed costs a query).
_GPU = ModelRows(Gpu, ("id", "index", "uuid", "healthy", "fault_acknowledged", "last_sample_at"))
_NODE_ID = -(2**62)  # no node has it
_GPUS_QUERY = CompiledQuery(
    lambda node_id: Gpu.objects.filter(node_id=node_id, present=True).order_by().values_list(*_GPU.names),
    node_id=_NODE_ID)
_HOLDERS_QUERY = CompiledQuery(
    lambda node_id: Allocation.objects.filter(node_id=node_id, ended_at__isnull=True).values_list("gpu_id", "job_id"),
    node_id=_NODE_ID)


def present_gpus(node: Node) -> dict[str, Gpu]:
    """The node's present GPUs by UUID: what its health verdicts and samples name."""
    gpus = (_GPU.build(row) for row in _GPUS_QUERY.rows(node_id=node.pk))
    return {gpu.uuid: gpu for gpu in gpus}


def telemetry_ingest(*, node: Node, rows: list[dict], now: datetime, gpus: dict[str, Gpu] | None = None) -> int:
    """Store a batch of samples from ``node``. Every row must name a GPU of this node and carry a time
    within ``MAX_AGENT_CLOCK_OFFSET`` of ``now``; a node clock off by more than ``MAX_CLOCK_SKEW`` is
    corrected by the offset of the batch's newest row, after which no row may be older than
    ``MAX_SAMPLE_AGE``. A row not newer than the GPU's latest stored sample is a replay and is skipped.
    Returns the number stored. ``gpus``: the node's present GPUs by UUID (``present_gpus``), read here if not given."""
    if not rows:
        return 0
    gpus = present_gpus(node) if gpus is None else gpus
    for i, row in enumerate(rows):
        if row["uuid"] not in gpus:
            raise TelemetryError(f"telemetry[{i}]: unknown GPU UUID {row['uuid']!r} for node {node.name}",
                                 field="telemetry")
        if abs(row["at"] - now) > MAX_AGENT_CLOCK_OFFSET:
            raise TelemetryError(f"telemetry[{i}].at: {row['at'].isoformat()} is more than "
                                 f"{MAX_AGENT_CLOCK_OFFSET.days} days from the portal's clock", field="telemetry")
    newest = max(row["at"] for row in rows)
    offset = now - newest if abs(now - newest) > MAX_CLOCK_SKEW else timedelta(0)
    for i, row in enumerate(rows):
        if row["at"] + offset < now - MAX_SAMPLE_AGE:
            raise TelemetryError(f"telemetry[{i}].at: {row['at'].isoformat()} is older than the "
                                 f"{_hours(MAX_SAMPLE_AGE)} h the portal keeps raw samples", field="telemetry")
    holders = dict(_HOLDERS_QUERY.rows(node_id=node.pk))
    samples, latest = [], {}
    for row in sorted(rows, key=lambda r: r["at"]):
        gpu = gpus[row["uuid"]]
        at = row["at"] + offset
        if gpu.last_sample_at is not None and at <= gpu.last_sample_at:
            continue
        sample = GpuSample(
            gpu=gpu, node=node, job_id=holders.get(gpu.pk), at=at, util_pct=row.get("util_pct"),
            mem_used_mb=row.get("mem_used_mb"), temperature_c=row.get("temperature_c"), power_w=row.get("power_w"),
            sm_clock_mhz=row.get("sm_clock_mhz"), ecc_uncorrected=row.get("ecc_uncorrected"), xid=row.get("xid"),
        )
        samples.append(sample)
        latest[gpu.pk] = sample
        if sample.xid is not None and sample.xid in APPLICATION_XIDS and sample.job_id:
            attempt = Job.objects.filter(pk=sample.job_id).values_list("attempt", flat=True).first() or 1
            JobEvent.objects.create(
                job_id=sample.job_id, attempt=attempt, at=now, kind="xid",
                message=f"application XID {sample.xid} on GPU {gpu.index} of {node.name}",
                details={"xid": sample.xid, "gpu": gpu.index, "uuid": gpu.uuid},
            )
    _samples_write(samples)
    if samples and samples[0].at < now - LATE_SAMPLE:
        # Late (a node that was cut off sends what it kept): a day of the ledger already summed may have read
        # its utilization without them. Those days are summed again by the next rollup.
        from accounting.services import usage_days_forget

        usage_days_forget(samples[0].at)
    _latest_keep(latest)
    return len(samples)


def _samples_write(samples: list[GpuSample]) -> None:
    """Insert ``samples`` in one statement: ``bulk_create``'s, without compiling it at each heartbeat."""
    if not samples:
        return
    fields = [field for field in GpuSample._meta.concrete_fields if not field.primary_key]
    columns = ", ".join(f'"{field.column}"' for field in fields)
    one = f"({', '.join(['%s'] * len(fields))})"
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{GpuSample._meta.db_table}" ({columns}) VALUES {", ".join([one] * len(samples))}',
            [getattr(sample, field.attname) for sample in samples for field in fields])


def _latest_keep(latest: dict[int, GpuSample]) -> None:
    """Keep each GPU's newest sample on its row (``latest``: by GPU id), every GPU in one statement. The node's
    heartbeat holds its node's row: no other writer of its GPUs (register, resume) runs meanwhile."""
    if not latest:
        return
    table = Gpu._meta.db_table
    rows = [(gpu_id, s.at, s.util_pct, s.mem_used_mb, s.temperature_c, s.power_w, s.sm_clock_mhz, s.ecc_uncorrected)
            for gpu_id, s in sorted(latest.items())]
    one = f"(%s::bigint, %s::timestamptz, {', '.join(['%s::double precision'] * 5)}, %s::bigint)"
    with connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{table}" SET "last_sample_at" = v.at, "util_pct" = v.util, "mem_used_mb" = v.mem, '
            f'"temperature_c" = v.temp, "power_w" = v.power, "sm_clock_mhz" = v.clock, "ecc_uncorrected" = v.ecc '
            f'FROM (VALUES {", ".join([one] * len(rows))}) '
            f'AS v(id, at, util, mem, temp, power, clock, ecc) WHERE "{table}"."id" = v.id',
            [value for row in rows for value in row])


def health_update(*, node: Node, reports: list[dict], now: datetime, gpus: dict[str, Gpu] | None = None
                  ) -> list[str]:
    """Apply the agent's health verdicts. A GPU turning unhealthy is taken out of scheduling, its node
    becomes ``unhealthy`` with the reason ("XID 79 on GPU 3"), and the jobs on it are asked to stop and
    are requeued. A GPU stays unhealthy until an admin resumes the node. Returns the new faults. ``gpus``: the
    node's present GPUs by UUID (``present_gpus``), read here if not given."""
    if not reports:  # most heartbeats carry no verdicts: no need to read the node's GPUs
        return []
    gpus = present_gpus(node) if gpus is None else gpus
    faults = []
    for i, item in enumerate(reports):
        gpu = gpus.get(item["uuid"])
        if gpu is None:
            raise TelemetryError(f"gpus[{i}]: unknown GPU UUID {item['uuid']!r} for node {node.name}", field="gpus")
        reason = f"{item.get('reason') or 'unhealthy'} on GPU {gpu.index}"[:200]
        if item["healthy"]:
            if gpu.fault_acknowledged:
                Gpu.objects.filter(pk=gpu.pk).update(fault_acknowledged="")
            continue
        if not gpu.healthy or reason == gpu.fault_acknowledged:
            continue
        Gpu.objects.filter(pk=gpu.pk).update(healthy=False, health_reason=reason, fault_acknowledged="")
        Node.objects.filter(pk=node.pk).exclude(state=Node.DOWN).update(
            state=Node.UNHEALTHY, state_reason=reason[:300], state_changed_at=now, state_changed_by=None
        )
        Job.objects.filter(
            state__in=HOLDING_STATES, stop_reason=StopReason.NONE, allocations__gpu=gpu,
            allocations__ended_at__isnull=True,
        ).update(stop_reason=StopReason.NODE_UNHEALTHY)
        faults.append(reason)
        log.warning("node %s: %s; node marked unhealthy", node.name, reason)
    return faults


def telemetry_rollup(*, now: datetime) -> tuple[int, int]:
    """Roll raw samples older than the retention into hourly rows per GPU and job, then delete them.
    Idempotent: an hour already rolled up is merged, never counted twice. Returns (rollups, deleted)."""
    cutoff = (now - RAW_RETENTION).replace(minute=0, second=0, microsecond=0)
    with transaction.atomic():
        groups = (
            GpuSample.objects.filter(at__lt=cutoff).annotate(hour=TruncHour("at")).values("gpu_id", "job_id", "hour")
            .annotate(n=Count("id"), util_avg=Avg("util_pct"), util_max=Max("util_pct"),
                      mem_max=Max("mem_used_mb"), temp_max=Max("temperature_c"), power_avg=Avg("power_w"))
        )
        made = 0
        for g in groups:
            rollup, created = GpuSampleRollup.objects.select_for_update().get_or_create(
                gpu_id=g["gpu_id"], job_id=g["job_id"], hour=g["hour"],
                defaults=dict(samples=g["n"], util_avg=g["util_avg"], util_max=g["util_max"],
                              mem_used_max_mb=g["mem_max"], temperature_max_c=g["temp_max"],
                              power_avg_w=g["power_avg"]),
            )
            if not created:
                total = rollup.samples + g["n"]

                def merged_avg(old, new, old_n=rollup.samples, new_n=g["n"], total=total):
                    if old is None or new is None:
                        return old if new is None else new
                    return (old * old_n + new * new_n) / total

                rollup.util_avg = merged_avg(rollup.util_avg, g["util_avg"])
                rollup.power_avg_w = merged_avg(rollup.power_avg_w, g["power_avg"])
                rollup.util_max = max(filter(None.__ne__, [rollup.util_max, g["util_max"]]), default=None)
                rollup.mem_used_max_mb = max(filter(None.__ne__, [rollup.mem_used_max_mb, g["mem_max"]]), default=None)
                rollup.temperature_max_c = max(filter(None.__ne__, [rollup.temperature_max_c, g["temp_max"]]),
                                               default=None)
                rollup.samples = total
                rollup.save()
            made += 1
        deleted, _ = GpuSample.objects.filter(at__lt=cutoff).delete()
    return made, deleted
