"""The cluster: GPU models (with prices attached elsewhere), pools, nodes, their GPUs and node tokens."""

import hashlib
import secrets

from django.conf import settings
from django.db import models

from portal.models import Team, slug_validator


class GpuModel(models.Model):
    """An accelerator type quotas and prices attach to, e.g. ``h100-80gb`` or the MIG profile
    ``a100-1g.10gb``. ``memory_mb`` is the memory of one device (or slice) in MiB."""

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    display_name = models.CharField(max_length=120, blank=True)
    vendor = models.CharField(max_length=40, default="nvidia")
    memory_mb = models.PositiveIntegerField()
    is_mig_profile = models.BooleanField(default=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def memory_gb(self) -> float:
        return round(self.memory_mb / 1024, 1)


def default_allowed_images() -> list[str]:
    """The allow-list a new pool starts with (settings.ROTA_DEFAULT_ALLOWED_IMAGES)."""
    return list(settings.ROTA_DEFAULT_ALLOWED_IMAGES)


class Pool(models.Model):
    """A set of nodes and the teams allowed to use them (tenant isolation). ``allowed_images`` are the
    patterns of the container images its nodes may run (``scheduler.images``; empty: none)."""

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    description = models.CharField(max_length=200, blank=True)
    teams = models.ManyToManyField(Team, blank=True, related_name="pools")
    allowed_images = models.JSONField(default=default_allowed_images, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    """A host with GPUs. Only ``ready`` nodes receive new work; every state change records why and who."""

    READY = "ready"
    DRAINING = "draining"
    DRAINED = "drained"
    DOWN = "down"
    UNHEALTHY = "unhealthy"
    STATES = [(s, s) for s in (READY, DRAINING, DRAINED, DOWN, UNHEALTHY)]

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="nodes")
    state = models.CharField(max_length=12, choices=STATES, default=DOWN)
    state_reason = models.CharField(max_length=300, blank=True)
    state_changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    state_changed_at = models.DateTimeField(null=True, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    driver_version = models.CharField(max_length=40, blank=True)
    cuda_version = models.CharField(max_length=20, blank=True)
    cpus = models.PositiveIntegerField(default=0)
    memory_mb = models.PositiveBigIntegerField(default=0)
    gpu_backend = models.CharField(max_length=20, blank=True)
    # How the node's agent runs jobs, as it registered: "container" (isolates tenants) or "process" (a demo
    # that does not); ``executor_info`` is what it reported: {"isolates", "runtime", "detail"}.
    executor = models.CharField(max_length=20, blank=True)
    executor_info = models.JSONField(default=dict, blank=True)
    agent_version = models.CharField(max_length=40, blank=True)
    registered_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    heartbeat_seq = models.BigIntegerField(default=0)
    # The cadence the portal last told the node (scheduler/services/node_cadence.py), written with
    # ``last_heartbeat_at``: the node is down once silent for ``heartbeat_timeout_s`` (none told yet: the setting).
    heartbeat_interval_s = models.PositiveIntegerField(null=True, blank=True)
    heartbeat_timeout_s = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(state__in=["ready", "draining", "drained", "down", "unhealthy"]),
                name="node_state_valid",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def isolates_tenants(self) -> bool:
        """Whether the node's executor said it keeps teams' jobs apart (unknown before it registers: no)."""
        return bool(self.executor_info.get("isolates"))


class Gpu(models.Model):
    """One accelerator (or MIG slice) on a node. ``healthy`` False keeps it out of scheduling."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=80, unique=True)
    model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="gpus")
    memory_mb = models.PositiveIntegerField()
    healthy = models.BooleanField(default=True)
    health_reason = models.CharField(max_length=200, blank=True)
    # A fault an admin resumed the node over: the agent keeps reporting it until it restarts, and the
    # portal ignores that one report (a different fault, or the same after a healthy report, drains again).
    fault_acknowledged = models.CharField(max_length=200, blank=True)
    present = models.BooleanField(default=True)
    mig_parent_index = models.PositiveSmallIntegerField(null=True, blank=True)
    # The latest sample, kept on the row so /metrics and the cluster page need one query:
    last_sample_at = models.DateTimeField(null=True, blank=True)
    util_pct = models.FloatField(null=True, blank=True)
    mem_used_mb = models.FloatField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)
    sm_clock_mhz = models.FloatField(null=True, blank=True)
    ecc_uncorrected = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_node_index")]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"


def hash_token(raw: str) -> str:
    """The stored form of a node token (SHA-256 hex): tokens are high-entropy, so no salt is needed."""
    return hashlib.sha256(raw.encode()).hexdigest()


class NodeToken(models.Model):
    """A node's credential. Only its hash is stored. ``revoked_at`` is when it stops working: a revoked token at
    once, a rotated one after the rotation's grace period."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="tokens")
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.node.name}:{self.prefix}…"

    @staticmethod
    def usable_at(at) -> models.Q:
        """Tokens that still work at ``at`` (a datetime, or ``Now()`` for the database's clock)."""
        return models.Q(revoked_at__isnull=True) | models.Q(revoked_at__gt=at)

    @classmethod
    def issue(cls, node: Node) -> tuple["NodeToken", str]:
        """Create a token for ``node``; return the row and the raw token (shown once)."""
        raw = "rn_" + secrets.token_urlsafe(32)
        token = cls.objects.create(node=node, token_hash=hash_token(raw), prefix=raw[3:11])
        return token, raw
