"""Quotas: per team x GPU model (optionally per pool), in GPUs (fractions allowed)."""

from django.db import models

from portal.models import Team
from scheduler.models.cluster import GpuModel, Pool


class Quota(models.Model):
    """``guaranteed`` GPUs are always available to the team (lent while idle, reclaimed by preemption);
    ``limit`` caps what it may hold including borrowing (blank: no cap); ``weight`` is its share of idle
    capacity; ``non_lendable`` is the part of the guarantee never lent to other teams."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="quotas")
    pool = models.ForeignKey(Pool, null=True, blank=True, on_delete=models.CASCADE, related_name="quotas")
    guaranteed = models.DecimalField(max_digits=9, decimal_places=3, default=0)
    limit = models.DecimalField(max_digits=9, decimal_places=3, null=True, blank=True)
    weight = models.DecimalField(max_digits=7, decimal_places=3, default=1)
    non_lendable = models.DecimalField(max_digits=9, decimal_places=3, default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__name", "gpu_model__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "gpu_model", "pool"], name="quota_unique_team_model_pool", nulls_distinct=False
            ),
            models.CheckConstraint(condition=models.Q(guaranteed__gte=0), name="quota_guaranteed_nonnegative"),
            models.CheckConstraint(
                condition=models.Q(limit__isnull=True) | models.Q(limit__gte=models.F("guaranteed")),
                name="quota_limit_at_least_guaranteed",
            ),
            models.CheckConstraint(condition=models.Q(weight__gt=0), name="quota_weight_positive"),
            models.CheckConstraint(
                condition=models.Q(non_lendable__gte=0) & models.Q(non_lendable__lte=models.F("guaranteed")),
                name="quota_non_lendable_within_guaranteed",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.gpu_model}: {self.guaranteed}/{self.limit}"
