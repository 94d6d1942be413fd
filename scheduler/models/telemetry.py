"""GPU telemetry from node agents: raw samples for hours, hourly rollups for months, job events."""

from django.db import models

from scheduler.models.cluster import Gpu, Node
from scheduler.models.jobs import Job


class GpuSample(models.Model):
    """One sample of one device, attributed to the job that held it then (if any). Units: %, MiB, °C, W,
    MHz. A metric the device does not support is NULL ("n/a"), never a guess."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="samples")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="gpu_samples")
    at = models.DateTimeField()
    util_pct = models.FloatField(null=True)
    mem_used_mb = models.FloatField(null=True)
    temperature_c = models.FloatField(null=True)
    power_w = models.FloatField(null=True)
    sm_clock_mhz = models.FloatField(null=True)
    ecc_uncorrected = models.BigIntegerField(null=True)
    xid = models.IntegerField(null=True)

    class Meta:
        indexes = [
            models.Index(fields=["gpu", "at"], name="sample_gpu_at_idx"),
            models.Index(fields=["job", "at"], name="sample_job_at_idx"),
            models.Index(fields=["at"], name="sample_at_idx"),
        ]


class GpuSampleRollup(models.Model):
    """Samples of one device (and job) over one hour, kept after the raw samples are deleted."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="rollups")
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="gpu_rollups")
    hour = models.DateTimeField()
    samples = models.PositiveIntegerField()
    util_avg = models.FloatField(null=True)
    util_max = models.FloatField(null=True)
    mem_used_max_mb = models.FloatField(null=True)
    temperature_max_c = models.FloatField(null=True)
    power_avg_w = models.FloatField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["gpu", "job", "hour"], name="rollup_unique_gpu_job_hour",
                                    nulls_distinct=False)
        ]


class JobEvent(models.Model):
    """Something that happened to a job without changing its state: an application XID on its GPU, a
    restart after failure, an idle warning."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    attempt = models.PositiveIntegerField()
    at = models.DateTimeField()
    kind = models.CharField(max_length=40)
    message = models.CharField(max_length=500)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]
