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


class AdmissionTally(models.Model):
    """Admissions counted as they are made, per team and GPU model (no model: a job that takes whichever is
    free): how many, their waits summed, and how many waited at most each bound of ``WAIT_BOUNDS_S`` (Kueue's
    ``kueue_admission_wait_time_seconds`` histogram, cumulative as Prometheus reads it). Written by the cycle in
    the same transaction as the admissions, so /metrics reads a row per queue instead of every admission ever
    made (``scheduler.metrics_kueue``)."""

    WAIT_BOUNDS_S = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="+")
    gpu_model = models.ForeignKey("scheduler.GpuModel", null=True, blank=True, on_delete=models.CASCADE,
                                  related_name="+")
    admitted = models.BigIntegerField(default=0)
    wait_sum_s = models.FloatField(default=0)
    wait_le_1 = models.BigIntegerField(default=0)
    wait_le_5 = models.BigIntegerField(default=0)
    wait_le_15 = models.BigIntegerField(default=0)
    wait_le_60 = models.BigIntegerField(default=0)
    wait_le_300 = models.BigIntegerField(default=0)
    wait_le_900 = models.BigIntegerField(default=0)
    wait_le_3600 = models.BigIntegerField(default=0)
    wait_le_14400 = models.BigIntegerField(default=0)
    wait_le_86400 = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "gpu_model"], nulls_distinct=False,
                                               name="admission_tally_queue")]

    @classmethod
    def bucket_columns(cls) -> list[str]:
        """The ``wait_le_*`` columns, in the order of ``WAIT_BOUNDS_S``."""
        return [f"wait_le_{bound}" for bound in cls.WAIT_BOUNDS_S]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.gpu_model_id or 'any'}: {self.admitted} admitted"
