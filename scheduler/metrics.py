"""Prometheus text exposition: per-GPU metrics named like NVIDIA's dcgm-exporter, queue metrics like
Kueue's. Built from the latest sample kept on each GPU row and job counts: a fixed number of queries."""

from django.db.models import Count, Sum

from scheduler.models import Allocation, Gpu, Job, Node, SchedulerBeat, ServiceLatency, ServiceTraffic
from scheduler.models.gateway import LATENCY_BUCKETS
from scheduler.models.jobs import JobState

GPU_METRICS = [
    # (metric name, Gpu field, help)
    ("DCGM_FI_DEV_GPU_UTIL", "util_pct", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "mem_used_mb", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_GPU_TEMP", "temperature_c", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "power_w", "Power draw (in W)."),
    ("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_uncorrected", "Total number of uncorrected (double-bit) ECC errors."),
]


def _label(value) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels) -> str:
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in labels.items()) + "}"


def render_metrics() -> str:
    """The whole /metrics page."""
    lines: list[str] = []
    gpus = list(Gpu.objects.filter(present=True).select_related("node", "model").order_by("node__name", "index"))
    holders = dict(Allocation.objects.filter(ended_at__isnull=True).values_list("gpu_id", "job_id"))
    for name, field, help_text in GPU_METRICS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for gpu in gpus:
            value = getattr(gpu, field)
            if value is None:
                continue
            labels = _labels(gpu=gpu.index, UUID=gpu.uuid, modelName=gpu.model.name, Hostname=gpu.node.name,
                             job=holders.get(gpu.pk, ""))
            lines.append(f"{name}{labels} {float(value):g}")
    lines += ["# HELP rota_gpu_healthy 1 if the GPU may be scheduled, else 0.", "# TYPE rota_gpu_healthy gauge"]
    for gpu in gpus:
        lines.append(f"rota_gpu_healthy{_labels(gpu=gpu.index, UUID=gpu.uuid, Hostname=gpu.node.name)} "
                     f"{1 if gpu.healthy else 0}")

    counts = {
        (row["team__name"], row["state"]): row["n"]
        for row in Job.objects.filter(state__in=[JobState.PENDING, JobState.HELD, JobState.ADMITTED,
                                                 JobState.STARTING, JobState.RUNNING])
        .values("team__name", "state").annotate(n=Count("id"))
    }
    teams = sorted({team for team, _ in counts})
    for metric, states, help_text in [
        ("rota_pending_jobs", (JobState.PENDING,), "Jobs waiting to be admitted, per team."),
        ("rota_held_jobs", (JobState.HELD,), "Jobs held by a person, per team."),
        ("rota_admitted_jobs", (JobState.ADMITTED, JobState.STARTING), "Jobs admitted and starting, per team."),
        ("rota_running_jobs", (JobState.RUNNING,), "Jobs running, per team."),
    ]:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        for team in teams:
            lines.append(f"{metric}{_labels(team=team)} {sum(counts.get((team, s), 0) for s in states)}")
    lines += ["# HELP rota_allocated_gpus GPUs (shares counted) held by open allocations, per team.",
              "# TYPE rota_allocated_gpus gauge"]
    for row in Allocation.objects.filter(ended_at__isnull=True).values("job__team__name").annotate(
        milli=Sum("share_milli")
    ).order_by("job__team__name"):
        lines.append(f"rota_allocated_gpus{_labels(team=row['job__team__name'])} {row['milli'] / 1000:g}")
    lines += ["# HELP rota_nodes Nodes per state.", "# TYPE rota_nodes gauge"]
    node_counts = dict(Node.objects.values_list("state").annotate(n=Count("id")))
    for state, _label_text in Node.STATES:
        lines.append(f"rota_nodes{_labels(state=state)} {node_counts.get(state, 0)}")
    # Alert on ``time() - rota_scheduler_last_run_timestamp_seconds > 60``: the worker or beat has stopped.
    lines += ["# HELP rota_scheduler_last_run_timestamp_seconds When the scheduler's periodic task last completed "
              "(task: cycle, liveness), in Unix seconds.",
              "# TYPE rota_scheduler_last_run_timestamp_seconds gauge"]
    for name, at in SchedulerBeat.objects.order_by("name").values_list("name", "at"):
        lines.append(f"rota_scheduler_last_run_timestamp_seconds{_labels(task=name)} {at.timestamp():.3f}")
    lines += _service_lines()
    from scheduler.metrics_kueue import kueue_lines  # it builds on this module's label quoting

    lines += kueue_lines()
    from scheduler.metrics_slurm import slurm_lines

    lines += slurm_lines(_labels)
    return "\n".join(lines) + "\n"


SERVICE_METRICS = (
    ("rota_service_requests_total", "requests", "Requests the gateway forwarded to an inference service."),
    ("rota_service_failed_requests_total", "failed", "Of those, the ones answered 5xx (by a replica or for want "
                                                     "of one)."),
    ("rota_service_request_seconds_total", "seconds_total", "Their total latency through the gateway, seconds."),
)


def _service_lines() -> list[str]:
    rows = list(ServiceTraffic.objects.select_related("team").order_by("team__name", "service"))
    lines: list[str] = []
    for name, field, help_text in SERVICE_METRICS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
        lines += [f"{name}{_labels(team=r.team.name, service=r.service)} {float(getattr(r, field)):g}" for r in rows]
    return lines + _latency_lines(rows)


def _latency_lines(rows: list[ServiceTraffic]) -> list[str]:
    """The gateway's latency histogram per service, as Prometheus histograms (cumulative ``le`` buckets)."""
    name = "rota_service_request_duration_seconds"
    counts: dict[int, dict[int, int]] = {}
    for traffic_id, bucket, count in ServiceLatency.objects.filter(traffic__in=rows).values_list(
            "traffic_id", "bucket", "count"):
        counts.setdefault(traffic_id, {})[bucket] = count
    lines = [f"# HELP {name} Latency of the requests the gateway forwarded to an inference service.",
             f"# TYPE {name} histogram"]
    for r in rows:
        total = 0
        for i, bound in enumerate(LATENCY_BUCKETS):
            total += counts.get(r.pk, {}).get(i, 0)
            le = "+Inf" if bound == float("inf") else f"{bound:g}"
            lines.append(f"{name}_bucket{_labels(team=r.team.name, service=r.service, le=le)} {total}")
        lines.append(f"{name}_sum{_labels(team=r.team.name, service=r.service)} {r.seconds_total:g}")
        lines.append(f"{name}_count{_labels(team=r.team.name, service=r.service)} {total}")
    return lines
