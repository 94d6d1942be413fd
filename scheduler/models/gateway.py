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
        cls.objects.get_or_create(team=team, service=service)
        cls.objects.filter(team=team, service=service).update(
            requests=models.F("requests") + 1, failed=models.F("failed") + int(failed),
            seconds_total=models.F("seconds_total") + seconds)
