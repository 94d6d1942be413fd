"""Quota loans: a team lends part of its guarantee of a GPU model to another team for a time window."""

from django.conf import settings
from django.db import models

from portal.models import Team
from scheduler.models.cluster import GpuModel


class QuotaLoan(models.Model):
    """``gpus`` of ``lender``'s guarantee of ``gpu_model`` (all pools) count as ``borrower``'s guarantee (and
    raise its limit as much) during ``[starts_at, ends_at)`` once approved. Asked by a team-admin of the
    borrower; approved or declined by a team-admin of the lender or a platform admin. The engine counts an
    approved loan only inside its window (``scheduler.core.loans``), so it ends by itself; ``ended`` is set
    afterwards for the record. Rows are never deleted: they are the loans' history."""

    REQUESTED, APPROVED, DECLINED, CANCELLED, ENDED = "requested", "approved", "declined", "cancelled", "ended"
    STATES = [(s, s) for s in (REQUESTED, APPROVED, DECLINED, CANCELLED, ENDED)]

    lender = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="loans_given")
    borrower = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="loans_taken")
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="loans")
    gpus = models.DecimalField(max_digits=9, decimal_places=3)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    state = models.CharField(max_length=10, choices=STATES, default=REQUESTED)
    reason = models.CharField(max_length=500)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                     related_name="+")
    requested_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-starts_at", "-id"]
        indexes = [models.Index(fields=["state", "ends_at"], name="quotaloan_state_ends")]
        constraints = [
            models.CheckConstraint(condition=models.Q(gpus__gt=0), name="quotaloan_gpus_positive"),
            models.CheckConstraint(condition=models.Q(ends_at__gt=models.F("starts_at")),
                                   name="quotaloan_ends_after_start"),
            models.CheckConstraint(condition=~models.Q(lender=models.F("borrower")), name="quotaloan_two_teams"),
        ]

    def __str__(self) -> str:
        return f"{self.lender} -> {self.borrower}: {self.gpus} {self.gpu_model} ({self.state})"

    def status_at(self, now) -> str:
        """The state as people read it at ``now``: an approved loan is ``scheduled``, ``active`` or ``ended``."""
        if self.state != self.APPROVED:
            return self.state
        if now < self.starts_at:
            return "scheduled"
        return "active" if now < self.ends_at else self.ENDED
