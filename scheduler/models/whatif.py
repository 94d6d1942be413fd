"""What-if replays: a past period of Rota's own history replayed with changed quotas, priorities or pool
sizes, stored so admins can revisit them."""

from django.conf import settings
from django.db import models


class WhatIfRun(models.Model):
    """One what-if request and, once the Celery task has run it, its results.

    changes: {"quotas": [{"team", "gpu_model", "guaranteed"?, "limit"?, "weight"?}],
              "priorities": {class name: value}, "pool_scale": {pool: factor}}.
    result: {"actual": {team: outcome}, "baseline": {...}, "changed": {...}, "summary": {...}} where an
    outcome is jobs, finished, avg/p95 wait seconds, GPU-hours and preemptions.
    """

    QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
    STATES = [(s, s) for s in (QUEUED, RUNNING, DONE, FAILED)]

    name = models.CharField(max_length=120)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    policy = models.CharField(max_length=20, default="rota")  # a preset, for runs that name no stored version
    # The stored policy versions the two replays run under (as configured, with the changes); unset: ``policy``.
    baseline_policy = models.ForeignKey("scheduler.PolicyVersion", null=True, blank=True, on_delete=models.PROTECT,
                                        related_name="+")
    changed_policy = models.ForeignKey("scheduler.PolicyVersion", null=True, blank=True, on_delete=models.PROTECT,
                                       related_name="+")
    changes = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=10, choices=STATES, default=QUEUED)
    progress = models.FloatField(default=0.0)  # 0..1 over both replays
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(period_end__gt=models.F("period_start")),
                                   name="whatif_period_ordered"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def policies_shown(self) -> str:
        """The policies of the two replays: "rota v1", "rota v1 → spread v2", or a preset's name."""
        if self.baseline_policy_id is None:
            return self.policy
        first, second = self.baseline_policy.label, self.changed_policy.label
        return first if first == second else f"{first} → {second}"
