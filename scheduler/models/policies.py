"""Scheduling policies as configuration: named policies, each edit an immutable numbered version, and the
activation log that says which version the live cycle used at any moment.

A ``PolicyVersion`` holds one value per knob of the engine's ``scheduler.core.types.Policy`` (the engine reads
every one of them); ``to_policy`` is the only translation. The active version is the one most recently
activated (``PolicyActivation``): an activation takes the scheduling cycle's lock, so no cycle runs across it
and the version active at a decision's time is exactly the version that made it."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from scheduler.core.types import Policy

ORDERINGS = ("fairshare", "fifo", "las")
PLACEMENTS = ("binpack", "spread")
PREEMPTION_SCOPES = ("team", "cluster")
# The knobs a version stores, in the engine's order (``scheduler.core.types.Policy`` less its name).
KNOBS = ("ordering", "backfill", "preemption", "borrowing", "placement", "fair_share_half_life_s",
         "guarantee_first", "las_thresholds_gpu_s", "preemption_scope", "reclaim")


class SchedulingPolicy(models.Model):
    """A named policy (``rota``, ``spread-inference``…). Its settings are its versions; the newest is current."""

    name = models.SlugField(max_length=40, unique=True)
    description = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "scheduling policies"

    def __str__(self) -> str:
        return self.name


class ImmutableQuerySet(models.QuerySet):
    """Versions and activations are history: a bulk update or delete is refused like a single one."""

    def update(self, **kwargs):
        raise ValidationError(f"{self.model.__name__} rows are immutable: record a new one instead")

    def delete(self):
        raise ValidationError(f"{self.model.__name__} rows are immutable: they are never deleted")


class _Immutable(models.Model):
    objects = ImmutableQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise ValidationError(f"{type(self).__name__} rows are immutable: record a new one instead")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValidationError(f"{type(self).__name__} rows are immutable: they are never deleted")


class PolicyVersion(_Immutable):
    """One immutable set of knob values of a policy (1, 2, …): an edit records a new version."""

    policy = models.ForeignKey(SchedulingPolicy, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    ordering = models.CharField(max_length=12, choices=[(o, o) for o in ORDERINGS])
    backfill = models.BooleanField()
    preemption = models.BooleanField()
    borrowing = models.BooleanField()
    placement = models.CharField(max_length=12, choices=[(p, p) for p in PLACEMENTS])
    fair_share_half_life_s = models.FloatField()
    guarantee_first = models.BooleanField()
    las_thresholds_gpu_s = models.JSONField(default=list, blank=True)
    preemption_scope = models.CharField(max_length=12, choices=[(s, s) for s in PREEMPTION_SCOPES])
    reclaim = models.BooleanField()
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["policy__name", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["policy", "number"], name="policy_version_number_unique"),
            models.CheckConstraint(condition=models.Q(number__gte=1), name="policy_version_number_positive"),
            models.CheckConstraint(condition=models.Q(fair_share_half_life_s__gt=0),
                                   name="policy_version_half_life_positive"),
            models.CheckConstraint(condition=models.Q(ordering__in=ORDERINGS), name="policy_version_ordering_known"),
            models.CheckConstraint(condition=models.Q(placement__in=PLACEMENTS),
                                   name="policy_version_placement_known"),
            models.CheckConstraint(condition=models.Q(preemption_scope__in=PREEMPTION_SCOPES),
                                   name="policy_version_scope_known"),
        ]

    def __str__(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        return f"{self.policy.name} v{self.number}"

    def knobs(self) -> dict:
        """The knob values, as the audit log and the API show them."""
        return {k: list(getattr(self, k)) if k == "las_thresholds_gpu_s" else getattr(self, k) for k in KNOBS}

    def to_policy(self) -> Policy:
        """The engine's policy for this version (named after it, so a replay's report says which it was)."""
        values = {k: getattr(self, k) for k in KNOBS}
        values["las_thresholds_gpu_s"] = tuple(float(t) for t in values["las_thresholds_gpu_s"])
        return Policy(name=self.label, **values)


class PolicyActivation(_Immutable):
    """From ``at`` on, the live cycle schedules with ``version`` (until the next activation)."""

    version = models.ForeignKey(PolicyVersion, on_delete=models.PROTECT, related_name="activations")
    at = models.DateTimeField(db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.version} from {self.at:%Y-%m-%d %H:%M:%S}"
