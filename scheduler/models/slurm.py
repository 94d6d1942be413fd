"""Slurm's record of each finished attempt that the Slurm bridge ran, beside Rota's ledger for it
(``scheduler/services/slurm_accounting.py``, ``docs/slurm.md``)."""

from django.db import models

from scheduler.models.cluster import Node
from scheduler.models.jobs import Job


class SlurmAccounting(models.Model):
    """One attempt as Slurm accounted it (elapsed time × GPUs) against Rota's GPU-seconds for it (its
    allocations, which the usage ledger rolls up); ``mismatch`` when they differ by more than the tolerance."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="slurm_accounting")
    attempt = models.PositiveIntegerField()
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="slurm_accounting")
    slurm_job_id = models.BigIntegerField()
    slurm_state = models.CharField(max_length=30)
    started_at = models.DateTimeField(null=True)
    ended_at = models.DateTimeField(null=True)
    elapsed_s = models.FloatField()
    gpus = models.PositiveIntegerField()
    gpus_from_slurm = models.BooleanField()  # False: Slurm recorded no GPU count (no slurmdbd); Rota's is used
    slurm_gpu_seconds = models.FloatField()
    rota_gpu_seconds = models.FloatField()
    tolerance_s = models.FloatField()
    mismatch = models.BooleanField()
    recorded_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-recorded_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["job", "attempt"], name="slurm_accounting_one_per_attempt")]
        indexes = [models.Index(fields=["mismatch", "recorded_at"], name="slurm_acct_mismatch_idx")]

    @property
    def difference_s(self) -> float:
        """Rota's GPU-seconds minus Slurm's."""
        return self.rota_gpu_seconds - self.slurm_gpu_seconds

    def __str__(self) -> str:
        return f"job {self.job_id}.{self.attempt} (Slurm {self.slurm_job_id}): Slurm {self.slurm_gpu_seconds:.0f} " \
               f"GPU-s, Rota {self.rota_gpu_seconds:.0f} GPU-s"
