"""Django admin for the cluster, quotas, priority classes and jobs.

What the governance pages and services change (quotas, priority classes, which teams may use a pool, a
node's state) and what the scheduler owns (jobs, allocations) is read-only here: those changes go through
the services, which check them and write the audit log. The admin still creates pools and GPU models and
edits node details.
"""

from django.contrib import admin

from portal.admin import Audited, ReadOnly
from scheduler.models import Allocation, Gpu, GpuModel, Job, JobTransition, Node, NodeToken, Pool, PriorityClass, Quota


@admin.register(GpuModel)
class GpuModelAdmin(Audited, admin.ModelAdmin):
    list_display = ["name", "vendor", "memory_mb", "is_mig_profile"]


@admin.register(Pool)
class PoolAdmin(Audited, admin.ModelAdmin):
    list_display = ["name", "description"]
    readonly_fields = ["teams", "allowed_images"]  # Govern -> Pools and Govern -> Images (checked, audited)


class GpuInline(ReadOnly, admin.TabularInline):
    """The agent reports GPUs; health is acknowledged by resuming the node on Govern -> Nodes (audited)."""

    model = Gpu
    extra = 0
    fields = ["index", "uuid", "model", "memory_mb", "healthy", "health_reason", "present"]


@admin.register(Node)
class NodeAdmin(Audited, admin.ModelAdmin):
    list_display = ["name", "pool", "state", "state_reason", "executor", "driver_version", "last_heartbeat_at"]
    list_filter = ["state", "pool"]
    inlines = [GpuInline]
    # Drain and resume on Govern -> Nodes (audited); the agent reports the rest.
    readonly_fields = ["state", "state_reason", "state_changed_at", "state_changed_by", "last_heartbeat_at",
                       "heartbeat_seq", "heartbeat_interval_s", "heartbeat_timeout_s", "registered_at", "executor",
                       "executor_info"]


@admin.register(NodeToken)
class NodeTokenAdmin(ReadOnly, admin.ModelAdmin):
    """View only: tokens are issued, rotated and revoked with ``manage.py node_token`` (audited); an admin
    form could neither show a new token nor keep a revocation from being undone."""

    list_display = ["node", "prefix", "created_at", "revoked_at"]


@admin.register(PriorityClass)
class PriorityClassAdmin(ReadOnly, admin.ModelAdmin):
    list_display = ["name", "value", "preemptible", "may_preempt", "min_runtime_s", "grace_period_s"]


@admin.register(Quota)
class QuotaAdmin(ReadOnly, admin.ModelAdmin):
    list_display = ["team", "gpu_model", "pool", "guaranteed", "limit", "weight", "non_lendable"]
    list_filter = ["gpu_model", "team"]


class TransitionInline(admin.TabularInline):
    model = JobTransition
    extra = 0
    readonly_fields = ["from_state", "to_state", "at", "cause", "actor", "details"]


@admin.register(Job)
class JobAdmin(ReadOnly, admin.ModelAdmin):
    list_display = ["id", "name", "team", "kind", "gpus", "state", "pending_reason_code", "created_at"]
    list_filter = ["state", "kind", "team"]
    search_fields = ["name", "command"]
    inlines = [TransitionInline]
    readonly_fields = ["state", "attempt", "stop_reason"]


@admin.register(Allocation)
class AllocationAdmin(ReadOnly, admin.ModelAdmin):
    list_display = ["job", "attempt", "node", "gpu", "share_milli", "started_at", "ended_at"]
    list_filter = ["node"]
