"""API keys of inference services: the credential a caller presents to the portal's gateway
(``/serve/<team>/<service>/…``). Only the key's SHA-256 hash is stored; the raw key is shown once."""

import hashlib
import secrets

from django.conf import settings
from django.db import models

from portal.models import Team, slug_validator


def hash_key(raw: str) -> str:
    """The stored form of a service key (SHA-256 hex): keys are high-entropy, so no salt is needed."""
    return hashlib.sha256(raw.encode()).hexdigest()


class ServiceKey(models.Model):
    """One API key of the service ``service`` (the replicas' base name) of ``team``. A revoked key stops at once."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="service_keys")
    service = models.CharField(max_length=100, validators=[slug_validator])
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["team", "service"], name="servicekey_team_service_idx")]

    def __str__(self) -> str:
        return f"{self.team.name}/{self.service}:{self.prefix}…"

    @classmethod
    def issue(cls, team: Team, service: str, user=None) -> tuple["ServiceKey", str]:
        """Create a key for ``team``'s ``service``; return the row and the raw key (shown once)."""
        raw = "rs_" + secrets.token_urlsafe(32)
        key = cls.objects.create(team=team, service=service, key_hash=hash_key(raw), prefix=raw[3:11],
                                 created_by=user)
        return key, raw

    @classmethod
    def admits(cls, team: Team, service: str, raw: str) -> bool:
        """Whether ``raw`` is an unrevoked key of exactly this team's service."""
        return bool(raw) and cls.objects.filter(team=team, service=service, key_hash=hash_key(raw),
                                                revoked_at__isnull=True).exists()


class ServiceTraffic(models.Model):
    """What the gateway forwarded to one service: requests, those that failed (5xx, from a replica or for want
    of one) and their total latency. One row per service, updated in place by each request."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="service_traffic")
    service = models.CharField(max_length=100, validators=[slug_validator])
    requests = models.PositiveBigIntegerField(default=0)
    failed = models.PositiveBigIntegerField(default=0)
    seconds_total = models.FloatField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "service"], name="servicetraffic_unique")]

    def __str__(self) -> str:
        return f"{self.team.name}/{self.service}: {self.requests}"

    @classmethod
    def record(cls, team: Team, service: str, *, failed: bool, seconds: float) -> None:
        """Count one forwarded request (atomic: concurrent requests all count)."""
        traffic, _ = cls.objects.get_or_create(team=team, service=service)
        cls.objects.filter(pk=traffic.pk).update(
            requests=models.F("requests") + 1, failed=models.F("failed") + int(failed),
            seconds_total=models.F("seconds_total") + seconds)
        bucket = next(i for i, bound in enumerate(LATENCY_BUCKETS) if seconds <= bound)
        if not ServiceLatency.objects.filter(traffic=traffic, bucket=bucket).update(count=models.F("count") + 1):
            row, _ = ServiceLatency.objects.get_or_create(traffic=traffic, bucket=bucket)
            ServiceLatency.objects.filter(pk=row.pk).update(count=models.F("count") + 1)


# Upper bounds (seconds) of the gateway's latency histogram, as Prometheus buckets; the last is +Inf.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, float("inf"))


class ServiceLatency(models.Model):
    """One bucket of a service's latency histogram: how many forwarded requests took at most ``LATENCY_BUCKETS
    [bucket]`` seconds and more than the bucket before (not cumulative; ``/metrics`` and the service page sum)."""

    traffic = models.ForeignKey(ServiceTraffic, on_delete=models.CASCADE, related_name="latency")
    bucket = models.PositiveSmallIntegerField()
    count = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["traffic", "bucket"], name="servicelatency_unique")]

    def __str__(self) -> str:
        return f"{self.traffic}: <= {LATENCY_BUCKETS[self.bucket]} s: {self.count}"


class InferenceService(models.Model):
    """The settings of one inference service (the replicas ``<name>`` / ``<name>-N`` of ``team``) beyond its
    jobs: its optional autoscale between ``min_replicas`` and ``max_replicas`` on request rate (``target_rps``
    requests per second per replica; scaling down waits ``scale_down_delay_s`` of low traffic), and what the
    autoscaler last measured and decided. Made when someone first scales or sets autoscale."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="inference_services")
    name = models.CharField(max_length=100, validators=[slug_validator])
    autoscale = models.BooleanField(default=False)
    min_replicas = models.PositiveSmallIntegerField(default=1)
    max_replicas = models.PositiveSmallIntegerField(default=1)
    target_rps = models.FloatField(default=10.0)
    scale_down_delay_s = models.PositiveIntegerField(default=60)
    # the autoscaler's last sample of ServiceTraffic.requests, and what it made of it
    sampled_requests = models.PositiveBigIntegerField(default=0)
    sampled_at = models.DateTimeField(null=True, blank=True)
    rate_rps = models.FloatField(null=True, blank=True)
    low_since = models.DateTimeField(null=True, blank=True)  # traffic fits fewer replicas since (hysteresis)
    last_decision = models.CharField(max_length=300, blank=True)
    last_decision_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="inferenceservice_unique")]

    def __str__(self) -> str:
        return f"{self.team.name}/{self.name}"
