"""Accounting: the usage ledger (allocation slices per hour), rollup watermark, versioned rate cards, budgets."""

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from portal.models import Team


class UsageRecord(models.Model):
    """The part of one allocation that falls in one hour ``[period_start, period_start + 1h)``.

    ``held_us`` is wall time held in the bucket (microseconds); ``gpu_seconds`` = held time × share, exact to
    the nanosecond. Team, user, job, kind, GPU model, pool and node are copied from the allocation so
    reports need no joins back into the scheduler. Rows are recomputed (upserted) by ``usage_rollup``, so
    an open allocation's last bucket grows until the allocation ends."""

    allocation = models.ForeignKey("scheduler.Allocation", on_delete=models.CASCADE, related_name="usage")
    period_start = models.DateTimeField()
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="usage")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="usage")
    job = models.ForeignKey("scheduler.Job", on_delete=models.CASCADE, related_name="usage")
    attempt = models.PositiveIntegerField()
    kind = models.CharField(max_length=20)
    gpu_model = models.ForeignKey("scheduler.GpuModel", on_delete=models.PROTECT, related_name="usage")
    pool = models.ForeignKey("scheduler.Pool", on_delete=models.PROTECT, related_name="usage")
    node = models.ForeignKey("scheduler.Node", on_delete=models.PROTECT, related_name="usage")
    share_milli = models.PositiveIntegerField()
    held_us = models.BigIntegerField()
    gpu_seconds = models.DecimalField(max_digits=24, decimal_places=9)
    open = models.BooleanField(default=False)  # counted up to the rollup time; corrected by later rollups

    class Meta:
        ordering = ["period_start", "id"]
        constraints = [
            models.UniqueConstraint(fields=["allocation", "period_start"], name="usage_unique_alloc_period"),
            models.CheckConstraint(condition=models.Q(held_us__gte=0), name="usage_held_nonnegative"),
        ]
        indexes = [
            models.Index(fields=["team", "period_start"], name="usage_team_period_idx"),
            models.Index(fields=["period_start"], name="usage_period_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.job_id} {self.period_start:%Y-%m-%d %H:00} {self.gpu_seconds}s"


class UsageDay(models.Model):
    """The ledger summed per day (in ``settings.TIME_ZONE``), job, GPU model, pool and rate card version, with
    the GPU-seconds weighted by utilization: what the accounting pages read for whole days instead of 24
    hourly rows per allocation.

    Written by the usage rollup, under its lock, for days whose hourly rows no rollup changes any more (more
    than ``LATE_COMMIT_SLACK`` before the watermark); ``RollupState(key="usage-days")`` says up to where. A
    rollup repair, a rollup into the past and any rate card change drop the days they touch, and the next
    rollup sums them again. The auditor checks the days against the hourly rows."""

    day = models.DateTimeField()
    card = models.IntegerField(null=True)  # the rate card version in force (NULL before the first card)
    job = models.ForeignKey("scheduler.Job", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    gpu_model = models.ForeignKey("scheduler.GpuModel", on_delete=models.PROTECT, related_name="+")
    pool = models.ForeignKey("scheduler.Pool", on_delete=models.PROTECT, related_name="+")
    gpu_seconds = models.DecimalField(max_digits=24, decimal_places=9)
    utilized_gpu_seconds = models.FloatField()  # GPU-seconds × utilization, where telemetry was kept
    measured_gpu_seconds = models.FloatField()  # GPU-seconds that had telemetry

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "card", "job", "kind", "team", "user", "gpu_model", "pool"],
                                    nulls_distinct=False, name="usageday_unique_line"),
        ]
        indexes = [
            models.Index(fields=["day"], name="usageday_day_idx"),
            models.Index(fields=["team", "day"], name="usageday_team_day_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.job_id} {self.day:%Y-%m-%d} {self.gpu_seconds}s"


class RollupState(models.Model):
    """How far the ledger has been rolled up (database time): ``usage`` for the hourly rows, ``usage-days@<time
    zone>`` for the summed days, with the rate cards they were summed under (``cards``)."""

    key = models.CharField(max_length=80, unique=True, default="usage")
    rolled_until = models.DateTimeField(null=True, blank=True)
    cards = models.TextField(blank=True)  # summed days: the rate cards (version@effective_from) they read
    updated_at = models.DateTimeField(auto_now=True)


class RateCard(models.Model):
    """A version of the price list, in force from ``effective_from`` until the next version starts."""

    version = models.PositiveIntegerField(unique=True)
    name = models.CharField(max_length=120, blank=True)
    effective_from = models.DateTimeField(unique=True)
    currency = models.CharField(max_length=3, default="USD")
    notes = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-effective_from"]

    def __str__(self) -> str:
        return f"v{self.version} from {self.effective_from:%Y-%m-%d}"


class RateCardEntry(models.Model):
    """The price of one GPU-hour of a GPU model (or MIG profile) on one rate card version."""

    rate_card = models.ForeignKey(RateCard, on_delete=models.CASCADE, related_name="entries")
    gpu_model = models.ForeignKey("scheduler.GpuModel", on_delete=models.PROTECT, related_name="rates")
    price_per_gpu_hour = models.DecimalField(max_digits=12, decimal_places=4)

    class Meta:
        ordering = ["rate_card", "gpu_model__name"]
        constraints = [
            models.UniqueConstraint(fields=["rate_card", "gpu_model"], name="rate_unique_card_model"),
            models.CheckConstraint(condition=models.Q(price_per_gpu_hour__gte=0), name="rate_price_nonnegative"),
        ]


class Budget(models.Model):
    """A team's monthly allowance in GPU-hours or money; dashboards warn at ``warn_percent`` and past 100%."""

    GPU_HOURS = "gpu-hours"
    MONEY = "money"
    UNITS = [(GPU_HOURS, "GPU-hours"), (MONEY, "money")]

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="budgets")
    unit = models.CharField(max_length=10, choices=UNITS, default=MONEY)
    amount = models.DecimalField(max_digits=14, decimal_places=2, validators=[MinValueValidator(Decimal(0))])
    warn_percent = models.PositiveSmallIntegerField(default=80, validators=[MaxValueValidator(100)])
    period = models.CharField(max_length=10, default="month")
    # Enforcement at 100 %: while ``exceeded_at`` is set (by the usage rollup) ``action`` applies: ``hold`` keeps
    # the team's waiting jobs from being admitted (they show BudgetExceeded), ``block`` refuses its new
    # submissions, ``lower`` runs them at the lowest priority class the team may use. Running work is never
    # stopped. Not enforced: the budget only warns (alerts at 50 %, ``warn_percent`` and 100 %).
    HOLD, BLOCK, LOWER = "hold", "block", "lower"
    ACTIONS = [(HOLD, "hold waiting work back"), (BLOCK, "refuse new submissions"),
               (LOWER, "lower the priority of new submissions")]
    enforce = models.BooleanField(default=False)
    action = models.CharField(max_length=5, choices=ACTIONS, default=HOLD)
    exceeded_at = models.DateTimeField(null=True, blank=True)
    used = models.DecimalField(max_digits=14, decimal_places=2, default=0)  # this month, at the last rollup

    class Meta:
        ordering = ["team__name", "unit"]
        constraints = [
            models.UniqueConstraint(fields=["team", "unit", "period"], name="budget_unique_team_unit_period"),
            models.CheckConstraint(condition=models.Q(amount__gte=0), name="budget_amount_nonnegative"),
            models.CheckConstraint(condition=models.Q(unit__in=["gpu-hours", "money"]), name="budget_unit_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.amount} {self.unit}/{self.period}"


class BudgetAlert(models.Model):
    """A budget threshold crossed in one period: fired once per (budget, period, threshold), when the usage
    rollup first sees the team's use at or past ``threshold`` % of the budget. The admin-visible alert list
    (Govern -> Budgets) and the team's page show them."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    period_start = models.DateField()  # the first day of the budget's period
    threshold = models.PositiveSmallIntegerField()  # percent
    used = models.DecimalField(max_digits=14, decimal_places=2)
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    fired_at = models.DateTimeField()

    class Meta:
        ordering = ["-fired_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["budget", "period_start", "threshold"],
                                               name="budgetalert_once_per_period")]

    def __str__(self) -> str:
        return f"{self.budget} {self.threshold}% ({self.period_start:%Y-%m})"


class Statement(models.Model):
    """A team's chargeback statement for one closed month (XLSX workbook or PDF), stored for download."""

    FORMATS = [("xlsx", "xlsx"), ("pdf", "pdf")]

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="statements")
    month = models.DateField()  # the first day of the month
    format = models.CharField(max_length=4, choices=FORMATS)
    content = models.BinaryField()
    size = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-month", "team__name", "format"]
        constraints = [
            models.UniqueConstraint(fields=["team", "month", "format"], name="statement_unique_team_month_format")
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.month:%Y-%m}.{self.format}"

    @property
    def filename(self) -> str:
        return f"rota-statement-{self.month:%Y-%m}-{self.team.name}.{self.format}"


class GpuPresence(models.Model):
    """One stretch a GPU (or MIG slice) was in the inventory as one GPU model: ``[since, until)``, ``until`` null
    while it still is. The inventory keeps no history (``Gpu.present`` is now), so the usage rollup records it
    here, and idle capacity and entitlements count each GPU only while it existed (``accounting.capacity``).
    Kept when the GPU row is deleted (``gpu`` becomes null): past months still had that GPU."""

    gpu = models.ForeignKey("scheduler.Gpu", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    gpu_model = models.ForeignKey("scheduler.GpuModel", on_delete=models.PROTECT, related_name="+")
    since = models.DateTimeField()
    until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["since", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu"], condition=models.Q(until__isnull=True), name="presence_one_open_per_gpu"
            ),
            models.CheckConstraint(
                condition=models.Q(until__isnull=True) | models.Q(until__gte=models.F("since")),
                name="presence_interval_ordered",
            ),
        ]
        indexes = [models.Index(fields=["since"], name="presence_since_idx")]

    def __str__(self) -> str:
        return f"{self.gpu_id} {self.gpu_model_id} {self.since:%Y-%m-%d %H:%M}–{self.until or ''}"
