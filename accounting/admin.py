from django.contrib import admin

from accounting.models import Budget, GpuPresence, RateCard, RateCardEntry, UsageRecord
from portal.admin import Audited, ReadOnly


class RateCardEntryInline(admin.TabularInline):
    model = RateCardEntry
    extra = 1


@admin.register(RateCard)
class RateCardAdmin(Audited, admin.ModelAdmin):
    list_display = ["version", "name", "effective_from", "currency"]
    inlines = [RateCardEntryInline]

    def audit_extra(self, obj) -> dict:
        return {"prices": {e.gpu_model.name: str(e.price_per_gpu_hour)
                           for e in obj.entries.select_related("gpu_model").order_by("gpu_model__name")}}


@admin.register(Budget)
class BudgetAdmin(ReadOnly, admin.ModelAdmin):
    """View only: budgets change under Govern → Budgets, with a reason in the audit log."""

    list_display = ["team", "unit", "amount", "warn_percent", "period"]
    list_select_related = ["team"]


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnly, admin.ModelAdmin):
    """View only: the ledger is rebuilt by the rollup, never edited or deleted by hand (a repair is
    ``manage.py usage_rollup --full``)."""

    list_display = ["period_start", "team", "user", "job", "gpu_model", "gpu_seconds", "open"]
    list_select_related = ["team", "user", "job", "gpu_model"]
    list_filter = ["kind", "open"]


@admin.register(GpuPresence)
class GpuPresenceAdmin(ReadOnly, admin.ModelAdmin):
    """View only: the inventory's history is recorded by the usage rollup, never edited or deleted by hand."""

    list_display = ["gpu", "gpu_model", "since", "until"]
    list_select_related = ["gpu__node", "gpu_model"]
    list_filter = ["gpu_model"]
